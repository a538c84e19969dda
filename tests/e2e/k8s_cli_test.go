package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The cluster commands refuse what they cannot run with before touching
// anything, with a message and exit status 2.
func TestK8sCommandsRefuseBadFlags(t *testing.T) {
	long(t)
	e := newEnv(t)
	kubeconfig := filepath.Join(e.dir, "kubeconfig")
	// A cluster nothing asks: every case stops before calling it.
	os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"+
		"contexts:\n- name: c\n  context:\n    cluster: c\ncurrent-context: c\n"), 0o600)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"scheduler", "--policy", "pack"}, `flexgv scheduler: --policy: placement policy "pack": use binpack or spread`},
		{[]string{"scheduler", "--listen", "8888"}, "flexgv scheduler: --listen 8888: not HOST:PORT"},
		{[]string{"scheduler", "--kubeconfig", filepath.Join(e.dir, "none")}, "flexgv scheduler: --kubeconfig " + filepath.Join(e.dir, "none")},
		{[]string{"webhook", "--tls-cert", "c.pem"}, "flexgv webhook: --tls-cert and --tls-key are required"},
		{[]string{"webhook", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "flexgv webhook: --tls-cert/--tls-key: open c.pem: no such file or directory"},
		{[]string{"daemon", "--kubernetes", "--node-name", ""}, "flexgv daemon: no node name; give --node-name or set NODE_NAME"},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--slots", "0"}, "flexgv daemon: --slots 0: a GPU holds at least one vGPU"},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--ctx-mem", "8MiB"}, "flexgv daemon: --ctx-mem 8 MiB: below 16 MiB"},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--health-interval", "0s"}, "flexgv daemon: --health-interval and --sync-interval must be positive"},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", filepath.Join(e.dir, "none")}, "flexgv daemon: --plugin-dir " + filepath.Join(e.dir, "none") + ": not a folder"},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", kubeconfig}, "flexgv daemon: --pod-resources " + kubeconfig + `: not the kubelet's socket ("" turns the check`},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--kubeconfig", filepath.Join(e.dir, "none")}, "flexgv daemon: --kubeconfig " + filepath.Join(e.dir, "none")},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--mps-pods"}, "flexgv daemon: --mps-pods offers the daemon's MPS to pods; give --mps too"},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--remote-addr", "unix://" + filepath.Join(e.dir, "s"), "--tenant-dir", e.dir},
			"flexgv daemon: remote vGPUs pass their tokens in Secrets of one namespace: give --secret-namespace or set POD_NAMESPACE"},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--cdi", "yes"}, `flexgv daemon: --cdi "yes": one of auto, on, off`},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--gpus", "GPU-1,"}, `flexgv daemon: --gpus "GPU-1,": an empty GPU name`},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--driver-libs", e.dir},
			"flexgv daemon: --driver-libs " + e.dir + ": no libcuda.so.1 there"},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--serve-admin", filepath.Join(e.dir, "a")},
			`flexgv daemon: --serve-admin "` + filepath.Join(e.dir, "a") + `": the absolute path of the admin socket of the flexgv serve of --remote-addr`},
		{[]string{"daemon", "--kubernetes", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--remote-addr", "unix://" + filepath.Join(e.dir, "s"),
			"--tenant-dir", e.dir, "--secret-namespace", "ns", "--serve-admin", "a.admin"},
			`flexgv daemon: --serve-admin "a.admin": the absolute path`},
		// The plugin's settings without the plugin are refused, not ignored.
		{[]string{"daemon", "--serve-admin", "/a"}, "flexgv daemon: --serve-admin is a setting of the device plugin; give --kubernetes too"},
		{[]string{"daemon", "--suspend-pods"}, "flexgv daemon: --suspend-pods is a setting of the device plugin; give --kubernetes too"},
		{[]string{"daemon", "--mps", "--mps-pods"}, "flexgv daemon: --mps-pods is a setting of the device plugin; give --kubernetes too"},
		{[]string{"daemon", "--slots", "2"}, "flexgv daemon: --slots is a setting of the device plugin; give --kubernetes too"},
		{[]string{"daemon", "--node-name", "n"}, "flexgv daemon: --node-name is a setting of the device plugin; give --kubernetes too"},
		{[]string{"daemon", "--cdi", "on"}, "flexgv daemon: --cdi is a setting of the device plugin; give --kubernetes too"},
	} {
		args := c.args
		if args[0] == "daemon" {
			// Checked after the plugin's flags: a daemon that let a bad
			// one through stops here rather than run.
			args = append(slices.Clone(args), "--metrics-addr", "x")
		}
		r := e.run("flexgv", args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(args, " "), r.code, r.stderr, c.msg)
		}
	}
}
