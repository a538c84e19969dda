package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// buildDir is make's build folder, with the files the image is made of.
func buildDir(t *testing.T) string {
	build := os.Getenv("FLEXGV_BUILD")
	if build == "" {
		build, _ = filepath.Abs(filepath.Join("..", "..", "build"))
	}
	if _, err := os.Stat(filepath.Join(build, "bin", "flexgv")); err != nil {
		t.Fatalf("%s has no flexgv build; run make first (make test does)", build)
	}
	return build
}

// ociImage reads back the one image of the OCI layout in out.
func ociImage(t *testing.T, out string) v1.Image {
	idx, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "dev" {
		t.Fatalf("the OCI layout's index lists %+v; want one image, named dev", m.Manifests)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// chrootRun runs the image's entrypoint with args, chrooted into rootfs
// with the image's environment, and returns its output.
func chrootRun(t *testing.T, rootfs string, cfg *v1.Config, args ...string) (string, error) {
	cmd := exec.Command(cfg.Entrypoint[0], append(cfg.Entrypoint[1:], args...)...)
	cmd.Env = cfg.Env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("chroot is not permitted here (%v): the image's programs are not run; run the tests as root", err)
	}
	return string(out), err
}

func TestImageRunsAndIsReproducible(t *testing.T) {
	build := buildDir(t)
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	digest, err := run(build, filepath.Join(dir, "a"), "flexgv:dev", rootfs)
	if err != nil {
		t.Fatal(err)
	}
	img := ociImage(t, filepath.Join(dir, "a"))
	if d, _ := img.Digest(); d != digest {
		t.Errorf("the OCI layout holds %s, the build said %s", d, digest)
	}

	// Again from copies of the files, made now, in another folder: the same
	// image, whatever the files' times and the folder.
	copied := filepath.Join(dir, "copy")
	for _, f := range append([]string{"bin/flexgv", "lib/libflexgv.so"}, inRemote()...) {
		data, err := os.ReadFile(filepath.Join(build, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(copied, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copied, f), data, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	again, err := run(copied, filepath.Join(dir, "b"), "flexgv:dev", "")
	if err != nil {
		t.Fatal(err)
	}
	if again != digest {
		t.Errorf("two builds of the same files: %s, then %s", digest, again)
	}
	for _, f := range []string{"flexgv.tar", "oci/index.json"} {
		a, _ := os.ReadFile(filepath.Join(dir, "a", f))
		b, _ := os.ReadFile(filepath.Join(dir, "b", f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the two builds (%d and %d bytes)", f, len(a), len(b))
		}
	}

	// flexgv.tar is docker save's format: docker load and podman load read
	// its manifest.json, which names the image and its config and layers.
	checkTarball(t, filepath.Join(dir, "a", "flexgv.tar"), img)

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config
	if !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/flexgv"}) || !slices.Contains(cfg.Env, "FLEXGV_SHIM=/usr/local/lib/libflexgv.so") {
		t.Errorf("the image's entrypoint is %q, its environment %q; want /usr/local/bin/flexgv and FLEXGV_SHIM=/usr/local/lib/libflexgv.so", cfg.Entrypoint, cfg.Env)
	}
	// FlexGV's files, where the CLI and the chart look for them.
	files := map[string]string{"/usr/local/bin/flexgv": "bin/flexgv", "/usr/local/lib/libflexgv.so": "lib/libflexgv.so"}
	for _, f := range inRemote() {
		files["/usr/local/"+f] = f
	}
	for in, src := range files {
		got, err := os.ReadFile(filepath.Join(rootfs, in))
		want, _ := os.ReadFile(filepath.Join(build, src))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the image: %v, %d bytes; want %s's %d", in, err, len(got), src, len(want))
		}
	}

	out, err := chrootRun(t, rootfs, &cfg, "version")
	if err != nil || !strings.HasPrefix(out, "flexgv ") {
		t.Errorf("flexgv version in the image: %v\n%s", err, out)
	}
	out, err = chrootRun(t, rootfs, &cfg, "--help")
	for _, c := range []string{"daemon", "scheduler", "webhook", "serve"} {
		if err != nil || !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("flexgv --help in the image: %v; want command %s listed\n%s", err, c, out)
		}
	}
	// The executor flexgv serve starts: it loads, and asks for its socket.
	exe := v1.Config{Entrypoint: []string{"/usr/local/remote/flexgv-executor"}, Env: cfg.Env}
	if out, err := chrootRun(t, rootfs, &exe); err == nil || !strings.Contains(out, "usage: flexgv-executor --fd N") {
		t.Errorf("flexgv-executor with no arguments in the image: %v; want its usage\n%s", err, out)
	}
	// Executors run as nobody, a user of the image.
	sh := v1.Config{Entrypoint: []string{"/bin/sh", "-c", `read -r l </etc/passwd; cp /etc/passwd /tmp/p && mv /tmp/p /tmp/q && mkdir -p /tmp/a/b && echo "$l"`}, Env: cfg.Env}
	if out, err := chrootRun(t, rootfs, &sh); err != nil || out != "root:x:0:0:root:/root:/bin/sh\n" {
		t.Errorf("/bin/sh, cp, mv and mkdir in the image: %v\n%s", err, out)
	}
	if passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc", "passwd")); !strings.Contains(string(passwd), "\nnobody:x:65534:65534:") {
		t.Errorf("the image's /etc/passwd has no nobody, whom executors run as:\n%s", passwd)
	}
}

// checkTarball reads flexgv.tar as docker load does: manifest.json names
// flexgv:dev, its config and layers are img's.
func checkTarball(t *testing.T, path string, img v1.Image) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		var b bytes.Buffer
		if _, err := b.ReadFrom(tr); err != nil {
			t.Fatal(err)
		}
		blobs[h.Name] = b.Bytes()
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(blobs["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("flexgv.tar's manifest.json: %v, %d images\n%s", err, len(manifest), blobs["manifest.json"])
	}
	m := manifest[0]
	cfgName, _ := img.ConfigName()
	layers, _ := img.Layers()
	if !slices.Equal(m.RepoTags, []string{"flexgv:dev"}) || !bytes.Contains([]byte(m.Config), []byte(cfgName.Hex)) || len(m.Layers) != len(layers) {
		t.Fatalf("flexgv.tar's manifest.json: %+v; want flexgv:dev, config %s and %d layers", m, cfgName, len(layers))
	}
	for i, l := range layers {
		d, _ := l.Digest()
		if blob := blobs[m.Layers[i]]; !strings.Contains(m.Layers[i], d.Hex) || len(blob) == 0 {
			t.Errorf("flexgv.tar's layer %d is %s (%d bytes); want %s", i, m.Layers[i], len(blob), d)
		}
	}
	if len(blobs[m.Config]) == 0 {
		t.Errorf("flexgv.tar has no %s, its config", m.Config)
	}
}

func TestImageRefusesAnIncompleteBuild(t *testing.T) {
	build := buildDir(t)
	partial := t.TempDir()
	if err := os.MkdirAll(filepath.Join(partial, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(build, "bin", "flexgv"))
	if err := os.WriteFile(filepath.Join(partial, "bin", "flexgv"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image")
	_, err := run(partial, out, "flexgv:dev", "")
	if err == nil || !strings.Contains(err.Error(), "(build it with make)") {
		t.Errorf("an image from a build with the CLI alone: %v; want the missing file named", err)
	}
	if _, serr := os.Stat(out); serr == nil {
		t.Errorf("a failed build left %s", out)
	}
	// A CLI without the Kubernetes commands (GOTAGS=nok8s), here a stand-in
	// that fails as it would.
	if err := os.WriteFile(filepath.Join(partial, "bin", "flexgv"), []byte("#!/bin/sh\necho unknown command \"$1\" >&2; exit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range append([]string{"lib/libflexgv.so"}, inRemote()...) {
		data, _ := os.ReadFile(filepath.Join(build, f))
		if err := os.MkdirAll(filepath.Dir(filepath.Join(partial, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(partial, f), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := run(partial, out, "flexgv:dev", ""); err == nil || !strings.Contains(err.Error(), "GOTAGS=nok8s") || !strings.Contains(err.Error(), "unknown command webhook") {
		t.Errorf("an image of a CLI without webhook: %v; want it refused, saying why", err)
	}
	if _, err := run(build, out, "flexgv:Not A Tag", ""); err == nil || !strings.Contains(err.Error(), "-tag flexgv:Not A Tag") {
		t.Errorf("-tag 'flexgv:Not A Tag': %v; want it refused", err)
	}
}

// The image's layers hold nothing but folders and files, in path order,
// with parents first: what unpack, and container runtimes, expect.
func TestImageLayersAreOrdered(t *testing.T) {
	data, err := layerTar(map[string]file{"/usr/local/bin/x": {"image_test.go", 0o755}}, map[string]string{"/etc/passwd": "root:x:0:0::/root:/bin/sh\n"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: time %v, owner %d:%d; want epoch and root", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		got = append(got, h.Name)
	}
	want := []string{"etc/", "etc/passwd", "root/", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/x"}
	if !slices.Equal(got, want) {
		t.Errorf("the layer holds %q; want %q", got, want)
	}
}

// inRemote are the remote files' paths under the build folder.
func inRemote() []string {
	var out []string
	for _, n := range remoteFiles {
		out = append(out, "remote/"+n)
	}
	return out
}
