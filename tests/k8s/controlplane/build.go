// Package controlplane starts a Kubernetes control plane for tests: etcd,
// kube-apiserver and kube-scheduler, built from the released Go modules
// this module pins (k8s.io/kubernetes and the etcd server it requires).
// Nothing is downloaded prebuilt: the binaries are built once per version
// into a cache folder and reused by every later run.
package controlplane

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Binaries are the control plane's programs.
type Binaries struct {
	Etcd, APIServer, Scheduler string
	Version                    string // of k8s.io/kubernetes
}

// programs maps each binary to the package it is built from.
var programs = []struct{ name, pkg string }{
	{"etcd", "./etcd"},
	{"kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"},
	{"kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"},
}

// CacheDir is where built control planes are kept: $FLEXGV_K8S_CACHE, else
// flexgv/k8s in the user's cache folder.
func CacheDir() (string, error) {
	if d := os.Getenv("FLEXGV_K8S_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache folder for the control plane (set FLEXGV_K8S_CACHE): %w", err)
	}
	return filepath.Join(d, "flexgv", "k8s"), nil
}

// pins reads the k8s.io/kubernetes version programs/go.mod pins, and a
// digest of its go.mod and go.sum: any change of a pin makes a new key.
func pins(dir string) (version, digest string, err error) {
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", "", err
	}
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		return "", "", err
	}
	out, err := exec.Command("go", "list", "-C", dir, "-m", "-f", "{{.Version}}", "k8s.io/kubernetes").Output()
	if err != nil {
		return "", "", fmt.Errorf("the k8s.io/kubernetes version %s/go.mod pins: %w", dir, err)
	}
	version = strings.TrimSpace(string(out))
	h := sha256.Sum256(append(mod, sum...))
	return version, hex.EncodeToString(h[:4]), nil
}

// Build returns the cached binaries for the versions pinned by the module
// in programsDir (this package's programs/), building them first if the
// cache has none; log says when it builds and how long that took.
// Concurrent callers wait for one build.
func Build(programsDir string, log func(format string, args ...any)) (Binaries, error) {
	version, digest, err := pins(programsDir)
	if err != nil {
		return Binaries{}, err
	}
	cache, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	// The Go version is in the key too: a toolchain upgrade rebuilds.
	dir := filepath.Join(cache, version+"-"+digest+"-"+runtime.Version()+"-"+runtime.GOOS+"-"+runtime.GOARCH)
	b := Binaries{
		Etcd:      filepath.Join(dir, "etcd"),
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Scheduler: filepath.Join(dir, "kube-scheduler"),
		Version:   version,
	}
	if _, err := os.Stat(dir); err == nil {
		return b, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Binaries{}, err
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return Binaries{}, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return Binaries{}, err
	}
	if _, err := os.Stat(dir); err == nil {
		return b, nil // built by whoever held the lock
	}
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return Binaries{}, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-o", tmp + "/"}
	for _, p := range programs {
		args = append(args, p.pkg)
	}
	log("building the control plane (k8s.io/kubernetes %s) into %s; once per version, some minutes", version, dir)
	start := time.Now()
	// -v names each package as it is compiled: counted, they show the
	// build moving along.
	cmd := exec.Command("go", append([]string{"build", "-v"}, args[1:]...)...)
	cmd.Dir = programsDir
	if out, err := runCounting(cmd, 30*time.Second, func(n int) {
		log("building the control plane: %d packages compiled in %s", n, time.Since(start).Round(time.Second))
	}); err != nil {
		return Binaries{}, fmt.Errorf("building the control plane: %w\n%s", err, out)
	}
	log("built the control plane in %s", time.Since(start).Round(time.Second))
	if err := os.Rename(tmp, dir); err != nil {
		return Binaries{}, err
	}
	return b, nil
}

// runCounting runs cmd, counting the lines of its output, and calls
// progress with the count every interval; it returns the last lines of the
// output, for an error.
func runCounting(cmd *exec.Cmd, interval time.Duration, progress func(lines int)) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return "", err
	}
	var last []string
	n := 0
	next := time.Now().Add(interval)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n++
		if last = append(last, sc.Text()); len(last) > 40 {
			last = last[1:]
		}
		if time.Now().After(next) {
			progress(n)
			next = time.Now().Add(interval)
		}
	}
	r.Close()
	return strings.Join(last, "\n"), cmd.Wait()
}
