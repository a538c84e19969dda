// Command image builds FlexGV's container image from make's build outputs,
// without a container engine or a base image: the flexgv CLI, the shim and
// the remote path's files, plus what they run with, taken from this machine
// as distroless images do (the dynamic loader and the libraries ldd lists,
// the shell and the three commands the node DaemonSet's init container runs,
// a passwd with the user executors run as). Every file gets the same owner
// and time, in a fixed order, so two builds of the same files give the same
// digest.
//
//	go run ./tools/image [-build build] [-out build/image] [-tag flexgv:dev] [-rootfs DIR]
//
// writes OUT/oci (an OCI image layout: crane push, skopeo copy oci:) and
// OUT/flexgv.tar (for docker load and podman load), and prints the tag and
// the image's digest; -rootfs also unpacks its files into DIR.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where things are in the image: the CLI finds the shim in ../lib and the
// executor in ../remote beside itself, and the node DaemonSet copies the
// shim and the remote libraries from there to the node.
const (
	cliPath   = "/usr/local/bin/flexgv"
	shimPath  = "/usr/local/lib/libflexgv.so"
	remoteDir = "/usr/local/remote"
)

// remoteFiles are the remote path's files in build/remote, put in
// remoteDir: the executor, and the libraries and nvidia-smi a remote pod
// is given.
var remoteFiles = []string{"libcuda.so.1", "libnvidia-ml.so.1", "libnvcuvid.so.1", "bin/nvidia-smi", "flexgv-executor"}

// tools are the commands of the node DaemonSet's init container, which
// copies the shim to the node: found on this machine's PATH, put in /bin.
var tools = []string{"sh", "cp", "mv", "mkdir"}

// epoch is every file's and the image's time: builds of the same files
// are the same image.
var epoch = time.Unix(0, 0).UTC()

// Files of /etc: root, and nobody for the executors flexgv serve starts
// (it runs them as flexgv-executor, else nobody); users and groups from
// these files only.
var etc = map[string]string{
	"/etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"/etc/group":         "root:x:0:\nnogroup:x:65534:\n",
	"/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
}

// file is one regular file of a layer: its contents come from src.
type file struct {
	src  string
	mode int64
}

func main() {
	build := flag.String("build", "build", "make's build folder")
	out := flag.String("out", "", "where the image goes (default: BUILD/image)")
	tag := flag.String("tag", "flexgv:dev", "the image's name in flexgv.tar (the chart's image.repository:image.tag)")
	rootfs := flag.String("rootfs", "", "also unpack the image's files into this folder")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *out == "" {
		*out = filepath.Join(*build, "image")
	}
	digest, err := run(*build, *out, *tag, *rootfs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s\n", *tag, digest)
}

func run(build, out, tag, rootfs string) (v1.Hash, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("-tag %s: %w", tag, err)
	}
	flexgv := map[string]file{
		cliPath:  {filepath.Join(build, "bin", "flexgv"), 0o755},
		shimPath: {filepath.Join(build, "lib", "libflexgv.so"), 0o755},
	}
	for _, n := range remoteFiles {
		flexgv[path.Join(remoteDir, n)] = file{filepath.Join(build, "remote", n), 0o755}
	}
	for p, f := range flexgv {
		if _, err := os.Stat(f.src); err != nil {
			return v1.Hash{}, fmt.Errorf("%s for %s: %w (build it with make)", f.src, p, errors.Unwrap(err))
		}
	}
	// The chart runs the Kubernetes commands, which GOTAGS=nok8s leaves out.
	if out, err := exec.Command(flexgv[cliPath].src, "webhook", "--help").CombinedOutput(); err != nil {
		return v1.Hash{}, fmt.Errorf("%s webhook --help: %v (a CLI built with GOTAGS=nok8s has no Kubernetes commands; build it without)\n%s",
			flexgv[cliPath].src, err, out)
	}
	base, err := runtimeFiles([]string{flexgv[cliPath].src, flexgv[path.Join(remoteDir, "flexgv-executor")].src})
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := image(base, flexgv)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(out); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(filepath.Join(out, "oci"), empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref.TagStr()})); err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(filepath.Join(out, "flexgv.tar"), ref, img); err != nil {
		return v1.Hash{}, err
	}
	if rootfs != "" {
		if err := unpack(img, rootfs); err != nil {
			return v1.Hash{}, fmt.Errorf("-rootfs %s: %w", rootfs, err)
		}
	}
	return img.Digest()
}

// runtimeFiles are the files the image's programs run with, besides
// FlexGV's: the init container's commands, what ldd says the programs
// load (the dynamic loader included), at the paths it names, and /etc.
func runtimeFiles(programs []string) (map[string]file, error) {
	files := map[string]file{}
	for _, t := range tools {
		p, err := exec.LookPath(t)
		if err != nil {
			return nil, fmt.Errorf("%s, which the node DaemonSet's init container runs: %w", t, err)
		}
		files["/bin/"+t] = file{p, 0o755}
		programs = append(programs, p)
	}
	for _, p := range programs {
		libs, err := ldd(p)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			files[l] = file{l, 0o755}
		}
	}
	return files, nil
}

// ldd lists the absolute paths of the libraries program loads, none for
// a static program. This machine's loader answers, as it would run it,
// without the caller's LD_ settings.
func ldd(program string) ([]string, error) {
	f, err := elf.Open(program)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", program, err)
	}
	dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	f.Close()
	if !dynamic {
		return nil, nil
	}
	cmd := exec.Command("ldd", program)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "LD_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	outb, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	var libs []string
	for _, line := range strings.Split(string(outb), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 3 && fields[1] == "=>" && fields[2] == "not":
			return nil, fmt.Errorf("ldd %s: %s is not found", program, fields[0])
		case len(fields) >= 3 && fields[1] == "=>":
			libs = append(libs, fields[2])
		case len(fields) == 2 && path.IsAbs(fields[0]):
			libs = append(libs, fields[0]) // the dynamic loader
		}
	}
	return libs, nil
}

// image is the two layers, the runtime's (which changes with this
// machine's libraries) under FlexGV's, with the CLI as entrypoint.
func image(base, flexgv map[string]file) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range []struct {
		files map[string]file
		etc   map[string]string
		what  string
	}{{base, etc, "runtime: dynamic loader, libraries, /bin/sh cp mv mkdir, /etc"}, {flexgv, nil, "flexgv CLI, shim, remote libraries and executor"}} {
		data, err := layerTar(l.files, l.etc)
		if err != nil {
			return nil, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: l.what}})
		if err != nil {
			return nil, err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = runtime.GOARCH, "linux", v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{cliPath}
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/bin", "FLEXGV_SHIM=" + shimPath}
	return mutate.ConfigFile(img, cfg)
}

// layerTar is a layer's uncompressed tar: files copied from their
// sources (links followed), the contents of etc, the folders above them,
// and /tmp and /root, owned by root, at epoch, in path order.
func layerTar(files map[string]file, etc map[string]string) ([]byte, error) {
	dirs := map[string]int64{}
	if etc != nil {
		dirs["/tmp"], dirs["/root"] = 0o1777, 0o700
	}
	var names []string
	for p := range files {
		names = append(names, p)
	}
	for p := range etc {
		names = append(names, p)
	}
	for _, p := range names {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	for d := range dirs {
		names = append(names, d)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), ModTime: epoch, Format: tar.FormatPAX}
		var data []byte
		if mode, ok := dirs[p]; ok {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", mode
		} else if s, ok := etc[p]; ok {
			h.Typeflag, h.Mode, data = tar.TypeReg, 0o644, []byte(s)
		} else {
			var err error
			if data, err = os.ReadFile(files[p].src); err != nil {
				return nil, err
			}
			h.Typeflag, h.Mode = tar.TypeReg, files[p].mode
		}
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// unpack writes img's files into dir, as a container runtime would.
func unpack(img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			// MkdirAll is subject to the umask; the image's mode is not.
			if err := os.Chmod(p, os.FileMode(h.Mode&0o777)|dirBits(h.Mode)); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777))
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: a tar entry of type %c, which this image has none of", h.Name, h.Typeflag)
		}
	}
}

// dirBits is the sticky bit of a tar mode, as Go's file mode.
func dirBits(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}
