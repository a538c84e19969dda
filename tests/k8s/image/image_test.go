// Package image checks that the image make image builds is the one the
// chart's pods expect: every container of the chart that runs FlexGV's
// image runs there, the node DaemonSet's init container installs the shim
// and the remote libraries the daemon is told of. The image's files run
// chrooted, as root (as make test runs); no control plane is needed.
package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

var repo, _ = filepath.Abs(filepath.Join("..", "..", ".."))

// render renders the chart as helm install would, with values over its own.
func render(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	ch, err := loader.Load(filepath.Join(repo, "deploy", "helm", "flexgv"))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := chartutil.CoalesceValues(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, merged, chartutil.ReleaseOptions{Name: "flexgv", Namespace: "flexgv-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, n := range names {
		for _, doc := range strings.Split(files[n], "\n---") {
			var m map[string]any
			if !strings.HasSuffix(n, ".yaml") || yaml.Unmarshal([]byte(doc), &m) != nil || len(m) == 0 {
				continue
			}
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

// imageConfig is what the image runs its containers with.
type imageConfig struct {
	Entrypoint []string
	Env        []string
}

// buildImage runs make image's tool on make's build folder and returns
// the unpacked image, its name and its config.
func buildImage(t *testing.T) (rootfs, tag string, cfg imageConfig) {
	build := os.Getenv("FLEXGV_BUILD")
	if build == "" {
		build = filepath.Join(repo, "build")
	}
	dir := t.TempDir()
	rootfs = filepath.Join(dir, "rootfs")
	cmd := exec.Command("go", "run", "./tools/image", "-build", build, "-out", filepath.Join(dir, "image"), "-rootfs", rootfs)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./tools/image: %v\n%s", err, out)
	}
	tag, _, _ = strings.Cut(string(out), " ")
	// The config, from the OCI layout: index.json, the manifest, the config.
	blob := func(digest string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "image", "oci", "blobs", strings.Replace(digest, ":", "/", 1)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var index, manifest struct {
		Manifests []struct{ Digest string }
		Config    struct{ Digest string }
	}
	idx, err := os.ReadFile(filepath.Join(dir, "image", "oci", "index.json"))
	if err != nil || json.Unmarshal(idx, &index) != nil || len(index.Manifests) != 1 {
		t.Fatalf("the image's index.json: %v\n%s", err, idx)
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct{ Config imageConfig }
	if err := json.Unmarshal(blob(manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	return rootfs, tag, config.Config
}

// chrootRun runs argv chrooted into rootfs with env.
func chrootRun(t *testing.T, rootfs string, env, argv []string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("chroot is not permitted here (%v): the image's programs are not run; run the tests as root", err)
	}
	return string(out), err
}

// containerEnv is the container's environment: the image's, then its own
// fixed values, as the kubelet makes it.
func containerEnv(img []string, c map[string]any) []string {
	env := slices.Clone(img)
	vars, _, _ := unstructured.NestedSlice(c, "env")
	for _, v := range vars {
		if val, ok := v.(map[string]any)["value"].(string); ok {
			env = append(env, fmt.Sprintf("%s=%s", v.(map[string]any)["name"], val))
		}
	}
	return env
}

func TestChartRunsTheImage(t *testing.T) {
	rootfs, tag, cfg := buildImage(t)
	for _, values := range []map[string]any{nil, {"remote": map[string]any{"port": 7070, "slots": 2}}} {
		objs := render(t, values)
		ran := 0
		for _, o := range objs {
			if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
				continue
			}
			spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
			inits, _, _ := unstructured.NestedSlice(spec, "initContainers")
			containers, _, _ := unstructured.NestedSlice(spec, "containers")
			for _, c := range append(inits, containers...) {
				c := c.(map[string]any)
				if c["image"] != tag {
					continue
				}
				ran++
				command, _, _ := unstructured.NestedStringSlice(c, "command")
				args, _, _ := unstructured.NestedStringSlice(c, "args")
				env := containerEnv(cfg.Env, c)
				// Its volumes, mounted by the kubelet: here folders of the rootfs.
				mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
				for _, m := range mounts {
					if err := os.MkdirAll(filepath.Join(rootfs, m.(map[string]any)["mountPath"].(string)), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if command != nil {
					// The init container: it installs into the node's folders,
					// here the rootfs's own.
					if out, err := chrootRun(t, rootfs, env, append(command, args...)); err != nil {
						t.Errorf("values %v: %s %s in the image: %v\n%s", values, o.GetName(), c["name"], err, out)
					}
					continue
				}
				// The entrypoint with the container's arguments: the command
				// exists (--help stops after parsing them).
				argv := append(slices.Clone(cfg.Entrypoint), args[0], "--help")
				if out, err := chrootRun(t, rootfs, env, argv); err != nil {
					t.Errorf("values %v: %s %s runs %q in the image: %v\n%s", values, o.GetName(), c["name"], argv, err, out)
				}
			}
		}
		if ran < 4 {
			t.Errorf("values %v: %d containers of the chart run image %s; want the node's, the scheduler's and the webhook's", values, ran, tag)
		}
		checkInstalled(t, rootfs, objs, values != nil)
	}
}

// checkInstalled: what the daemon is told (--shim, --remote-lib) is what
// the init container installed, byte for byte the image's files.
func checkInstalled(t *testing.T, rootfs string, objs []*unstructured.Unstructured, remote bool) {
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		want := map[string]string{}
		for _, a := range args {
			if p, ok := strings.CutPrefix(a, "--shim="); ok {
				want[p] = "/usr/local/lib/libflexgv.so"
			}
			if p, ok := strings.CutPrefix(a, "--tenant-dir="); ok {
				// flexgv serve's, which the init container makes for the
				// daemon: its tenants' token files, root's alone.
				if fi, err := os.Stat(filepath.Join(rootfs, p)); err != nil || fi.Mode() != os.ModeDir|0o700 {
					t.Errorf("after the init container, %s: %v; want a folder of mode 0700", p, err)
				}
			}
			if p, ok := strings.CutPrefix(a, "--remote-lib="); ok {
				for _, lib := range []string{"libcuda.so.1", "libnvidia-ml.so.1", "libnvcuvid.so.1", "bin/nvidia-smi"} {
					want[p+"/"+lib] = "/usr/local/remote/" + lib
				}
			}
		}
		if len(want) != map[bool]int{false: 1, true: 5}[remote] {
			t.Fatalf("the node daemon runs with %q; want --shim, and --remote-lib with remote vGPUs", args)
		}
		for node, img := range want {
			got, err := os.ReadFile(filepath.Join(rootfs, node))
			src, _ := os.ReadFile(filepath.Join(rootfs, img))
			if err != nil || len(src) == 0 || !bytes.Equal(got, src) {
				t.Errorf("after the init container, %s: %v (%d bytes); want the image's %s (%d bytes)", node, err, len(got), img, len(src))
			}
			if err := os.Remove(filepath.Join(rootfs, node)); err != nil {
				t.Error(err)
			}
		}
	}
}
