// Package hollow is a Kubernetes node for tests: the kubelet's own code
// (cmd/kubelet/app RunKubelet, as kubemark's hollow node runs it, from the
// k8s.io/kubernetes module this module pins) with the kubelet's real device
// manager and pod-resources server, against a fake container runtime
// (Runtime) that records what the kubelet asks of it and runs each
// container's command under what it was given.
//
// The kubelet runs in a process of its own (the test binary run again,
// see Main), so that a test can restart it, as a node's kubelet restarts,
// while the runtime and its containers go on in the test's process. The
// device manager's folder is fixed (/var/lib/kubelet/device-plugins), as
// in a kubelet: run it in a mount namespace of its own.
package hollow

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	noopoteltrace "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	"k8s.io/kubernetes/pkg/kubelet"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	probetest "k8s.io/kubernetes/pkg/kubelet/prober/testing"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
	"k8s.io/kubernetes/pkg/util/oom"
	"k8s.io/kubernetes/pkg/volume/util/hostutil"
	"k8s.io/kubernetes/pkg/volume/util/subpath"
	"k8s.io/mount-utils"
)

// Env, set in a process's environment, makes Main run a kubelet with the
// Config it holds (JSON).
const Env = "FLEXGV_HOLLOW_KUBELET"

// Config is one kubelet's.
type Config struct {
	NodeName   string
	Labels     map[string]string
	RootDir    string // the kubelet's --root-dir
	Kubeconfig string
	Runtime    string // the CRI socket (StartRuntime's)
}

// PodResources is the kubelet's pod-resources socket.
func (c Config) PodResources() string {
	return filepath.Join(c.RootDir, "pod-resources", "kubelet.sock")
}

// Kubelet is a kubelet's process.
type Kubelet struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a kubelet with cfg in a process of its own (this program run
// again with Env set: its main must call Main first), its log to logPath.
func Start(cfg Config, logPath string) (*Kubelet, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), Env+"="+string(b))
	cmd.Stdout, cmd.Stderr = f, f
	// A mount namespace of its own (Go makes its mounts private): see Main.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Unshareflags: syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	k := &Kubelet{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(k.done) }()
	return k, nil
}

// Stop kills the kubelet, as a node's kubelet dies: what it has written
// (the device manager's checkpoint) stays.
func (k *Kubelet) Stop() {
	k.cmd.Process.Kill()
	<-k.done
}

// Main runs the kubelet Env describes and returns only if it could not
// start: the process ends when its parent kills it.
func Main() {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(Env)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "hollow kubelet: %s: %v\n", Env, err)
		os.Exit(2)
	}
	// The kubelet links each container's log into /var/log/containers, a
	// fixed folder: a tmpfs of this process's mount namespace keeps the
	// host's /var/log as it is.
	if err := unix.Mount("tmpfs", "/var/log", "tmpfs", 0, "mode=0755"); err != nil {
		fmt.Fprintf(os.Stderr, "hollow kubelet: tmpfs on /var/log: %v\n", err)
		os.Exit(1)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "hollow kubelet: %v\n", err)
		os.Exit(1)
	}
	select {}
}

func run(cfg Config) error {
	ctx := context.Background()
	logger := klog.Background()
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return err
	}
	rc.UserAgent = "hollow-kubelet"
	client, err := clientset.NewForConfig(rc)
	if err != nil {
		return err
	}
	flags, kc, err := kubeletConfig(cfg)
	if err != nil {
		return err
	}
	hb := *rc
	hb.Timeout = kc.NodeStatusUpdateFrequency.Duration
	hb.QPS = -1
	heartbeat, err := clientset.NewForConfig(&hb)
	if err != nil {
		return err
	}
	runtime, err := remote.NewRemoteRuntimeService(ctx, "unix://"+cfg.Runtime, 15*time.Second, noopoteltrace.NewTracerProvider(), false)
	if err != nil {
		return err
	}
	images, err := remote.NewRemoteImageService(ctx, "unix://"+cfg.Runtime, 15*time.Second, noopoteltrace.NewTracerProvider(), false)
	if err != nil {
		return err
	}
	cm, err := newContainerManager(logger)
	if err != nil {
		return err
	}
	// kubemark's dependencies (pkg/kubemark NewHollowKubelet), but for the
	// container manager, and the node's real files: the kubelet writes the
	// pods' folders and files the runtime is given.
	deps := &kubelet.Dependencies{
		KubeClient:                client,
		HeartbeatClient:           heartbeat,
		ProbeManager:              probetest.FakeManager{},
		RemoteRuntimeService:      runtime,
		RemoteImageService:        images,
		CAdvisorInterface:         &cadvisortest.Fake{NodeName: cfg.NodeName},
		ContainerManager:          cm,
		OOMAdjuster:               oom.NewFakeOOMAdjuster(),
		Mounter:                   &mount.FakeMounter{},
		Subpather:                 &subpath.FakeSubpath{},
		HostUtil:                  hostutil.NewFakeHostUtil(nil),
		PodStartupLatencyTracker:  kubeletutil.NewPodStartupLatencyTracker(),
		NodeStartupLatencyTracker: kubeletutil.NewNodeStartupLatencyTracker(logger),
		TracerProvider:            noopoteltrace.NewTracerProvider(),
		Recorder:                  &record.FakeRecorder{}, // a real one reads /dev/kmsg
	}
	return kubeletapp.RunKubelet(ctx, &options.KubeletServer{KubeletFlags: *flags, KubeletConfiguration: *kc}, deps)
}

// kubeletConfig is kubemark's (pkg/kubemark GetHollowKubeletConfig) with
// no server, no static pods, and quick status updates.
func kubeletConfig(cfg Config) (*options.KubeletFlags, *kubeletconfig.KubeletConfiguration, error) {
	f := options.NewKubeletFlags()
	f.RootDirectory = cfg.RootDir
	f.HostnameOverride = cfg.NodeName
	f.MinimumGCAge = metav1.Duration{Duration: time.Minute}
	f.MaxContainerCount = 100
	f.MaxPerPodContainerCount = 2
	f.NodeLabels = cfg.Labels
	c, err := options.NewKubeletConfiguration()
	if err != nil {
		return nil, nil, err
	}
	logs := filepath.Join(cfg.RootDir, "pod-logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, nil, err
	}
	c.ContainerRuntimeEndpoint = "unix://" + cfg.Runtime
	c.ImageServiceEndpoint = c.ContainerRuntimeEndpoint
	c.EnableServer = false
	c.ReadOnlyPort = 0
	c.SyncFrequency.Duration = 10 * time.Second
	c.NodeStatusUpdateFrequency.Duration = time.Second
	c.NodeStatusReportFrequency.Duration = time.Second
	c.ClusterDNS = []string{}
	c.ImageGCHighThresholdPercent = 90
	c.ImageGCLowThresholdPercent = 80
	c.ProviderID = "hollow://" + cfg.NodeName
	c.VolumeStatsAggPeriod.Duration = time.Minute
	c.CgroupRoot = ""
	c.CgroupsPerQOS = false
	c.EnforceNodeAllocatable = nil
	c.EnableControllerAttachDetach = false
	c.HairpinMode = kubeletconfig.HairpinVeth
	c.MaxOpenFiles = 1024
	c.ResolverConfig = kubetypes.ResolvConfDefault
	c.KubeletCgroups = "/kubelet"
	c.SystemCgroups = ""
	c.ProtectKernelDefaults = false
	c.RegisterNode = true
	c.LocalStorageCapacityIsolation = true
	c.PodLogsDir = logs
	c.FailSwapOn = false
	// The host's firewall is not the test's to change.
	c.MakeIPTablesUtilChains = false
	return f, c, nil
}
