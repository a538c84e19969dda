// Package k8s tests FlexGV on Kubernetes against a real control plane:
// etcd, kube-apiserver and kube-scheduler built from the released modules
// this module pins (see controlplane), with flexgv scheduler as the
// scheduler's extender and nodes whose GPUs are the simulated GPU.
package k8s

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"

	"github.com/flexgv/flexgv/tests/k8s/controlplane"
	"github.com/flexgv/flexgv/tests/k8s/hollow"
)

var (
	cp *controlplane.ControlPlane
	// build is the FlexGV build folder (make's build/): bin/flexgv, the
	// shim, the simulated GPU and the test clients.
	build string
)

func TestMain(m *testing.M) {
	// A hollow node's kubelet runs in this binary run again (hollow.Start).
	if os.Getenv(hollow.Env) != "" {
		hollow.Main()
	}
	os.Exit(run(m))
}

// mountNS marks the test binary run again in a mount namespace of its own.
const mountNS = "FLEXGV_K8S_TEST_MOUNTNS"

// kubeletDir is where a kubelet's device manager and its plugins meet;
// a test may use it when privateKubelet, a tmpfs of this process's own.
const kubeletDir = "/var/lib/kubelet/device-plugins"

var privateKubelet bool

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "k8s: "+format+"\n", args...) }

// inMountNS runs the tests again in a mount namespace where kubeletDir is
// a private tmpfs, and returns their exit status; ok is false where that
// cannot be (not root), and the tests run here without it.
func inMountNS() (code int, ok bool) {
	if os.Geteuid() != 0 {
		logf("not root: no mount namespace for the kubelet's device manager; its tests are skipped")
		return 0, false
	}
	if err := os.MkdirAll(kubeletDir, 0o755); err != nil {
		logf("%v; the kubelet's device manager tests are skipped", err)
		return 0, false
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), mountNS+"=1")
	// Go makes the new namespace's mounts private.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), true
		}
		logf("%v; the kubelet's device manager tests are skipped", err)
		return 0, false
	}
	return 0, true
}

func run(m *testing.M) int {
	if os.Getenv(mountNS) == "" {
		if code, ok := inMountNS(); ok {
			return code
		}
	} else {
		if err := unix.Mount("tmpfs", kubeletDir, "tmpfs", 0, "mode=0750"); err != nil {
			logf("tmpfs on %s: %v", kubeletDir, err)
			return 1
		}
		privateKubelet = true
	}
	build = os.Getenv("FLEXGV_BUILD")
	if build == "" {
		build, _ = filepath.Abs("../../build")
	}
	if _, err := os.Stat(filepath.Join(build, "bin", "flexgv")); err != nil {
		logf("no flexgv in %s/bin (run make, or set FLEXGV_BUILD): %v", build, err)
		return 1
	}
	wd, _ := os.Getwd()
	bins, err := controlplane.Build(filepath.Join(wd, "controlplane", "programs"), logf)
	if err != nil {
		logf("%v", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "flexgv-k8s-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	cp, err = controlplane.Start(bins, dir)
	if err != nil {
		logf("starting the control plane: %v", err)
		return 1
	}
	logf("etcd and kube-apiserver (k8s.io/kubernetes %s) ready in %s", bins.Version, cp.Started.Round(time.Millisecond))
	// The kubelet's device manager logs through klog: to a file, kept with
	// the control plane's logs.
	if f, err := os.Create(filepath.Join(dir, "kubelet.log")); err == nil {
		klog.LogToStderr(false)
		klog.SetOutput(f)
		defer f.Close()
	}
	stopExtender, took, err := startScheduling()
	if err != nil {
		logf("%v", err)
		cp.Stop()
		return 1
	}
	logf("flexgv scheduler and kube-scheduler ready in %s", took.Round(time.Millisecond))
	code := m.Run()
	stopExtender()
	cp.Stop()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		logf("control plane logs kept in %s", dir)
	}
	return code
}

// startScheduling starts flexgv scheduler, and kube-scheduler with it as
// its extender configured as deploy/ configures it, for every test.
func startScheduling() (stop func(), took time.Duration, err error) {
	start := time.Now()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0, err
	}
	addr := l.Addr().String()
	l.Close()
	logPath := filepath.Join(cp.Dir, "flexgv-scheduler.log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	cmd := exec.Command(filepath.Join(build, "bin", "flexgv"), "scheduler", "--listen", addr, "--kubeconfig", cp.Kubeconfig, "--policy", "binpack")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	stop = func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }
	ready := false
	for range 200 {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			ready = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !ready {
		stop()
		b, _ := os.ReadFile(logPath)
		return nil, 0, fmt.Errorf("flexgv scheduler did not answer on %s:\n%s", addr, b)
	}
	extenders, err := chartExtenders("http://" + addr)
	if err != nil {
		stop()
		return nil, 0, fmt.Errorf("the chart's scheduler configuration: %w", err)
	}
	if _, err := cp.StartScheduler(extenders); err != nil {
		stop()
		return nil, 0, err
	}
	return stop, time.Since(start), nil
}

// startFlexGV runs build/bin/flexgv with args until the test ends, its
// output in a log file the test shows if it fails.
func startFlexGV(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(cp.Dir, strings.ReplaceAll(t.Name(), "/", "_")+"-flexgv-"+args[0]+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(filepath.Join(build, "bin", "flexgv"), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("flexgv %s log:\n%s", args[0], b)
		}
	})
	return cmd
}

// namespace creates a namespace for one test, removed with its pods at
// the end (at once: no kubelet runs them).
func namespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		cp.Client.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	})
	return name
}

// eventually polls cond every 50 ms until it holds or limit passes.
func eventually(t *testing.T, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s (last error: %v)", limit, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watchPods watches namespace ns's pods from now on, into a channel read
// at once (the API server drops a watcher that falls behind, as a test's
// would while it creates pods); a watch the API server ends all the same
// (it also drops watchers it cannot serve fast enough on a loaded machine)
// is opened again where it left off. Stopped when the test ends.
func watchPods(t *testing.T, ns string) <-chan watch.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cp.Client.CoreV1().Pods(ns).Watch(ctx, o)
		}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(); cancel() })
	out := make(chan watch.Event, 4096)
	go func() {
		defer close(out)
		for ev := range w.ResultChan() {
			out <- ev
		}
	}()
	return out
}
