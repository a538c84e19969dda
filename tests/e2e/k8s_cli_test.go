package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cluster commands refuse what they cannot run with before touching
// anything, with a message and exit status 2.
func TestK8sCommandsRefuseBadFlags(t *testing.T) {
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
		{[]string{"device-plugin", "--node-name", ""}, "flexgv device-plugin: no node name; give --node-name or set NODE_NAME"},
		{[]string{"device-plugin", "--node-name", "n", "--slots", "0"}, "flexgv device-plugin: --slots 0: a GPU holds at least one vGPU"},
		{[]string{"device-plugin", "--node-name", "n", "--ctx-mem", "8MiB"}, "flexgv device-plugin: --ctx-mem 8 MiB: below 16 MiB"},
		{[]string{"device-plugin", "--node-name", "n", "--plugin-dir", filepath.Join(e.dir, "none")}, "flexgv device-plugin: --plugin-dir " + filepath.Join(e.dir, "none") + ": not a folder"},
		{[]string{"device-plugin", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", kubeconfig}, "flexgv device-plugin: --pod-resources " + kubeconfig + `: not the kubelet's socket ("" turns the check`},
	} {
		r := e.run("flexgv", c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), r.code, r.stderr, c.msg)
		}
	}
	// Without its node daemon the plugin says so, before registering.
	r := e.run("flexgv", "device-plugin", "--node-name", "n", "--plugin-dir", e.dir, "--pod-resources", "", "--kubeconfig", kubeconfig)
	if want := "flexgv device-plugin: no node daemon on " + filepath.Join(e.dir, "tenants", "daemon.sock") + " (start flexgv daemon, or give --socket)"; r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("flexgv device-plugin without a daemon: exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, want)
	}
}
