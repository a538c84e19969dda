//go:build !nok8s

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/flexgv/flexgv/internal/k8s/deviceplugin"
	"github.com/flexgv/flexgv/internal/k8s/kubeclient"
	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/launch"
	"github.com/flexgv/flexgv/internal/mps"
	"github.com/flexgv/flexgv/internal/remote"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// devicePluginFlags adds --kubernetes and the device plugin's settings to
// the daemon's command. The function it returns checks them once the
// command line is parsed, and gives what the daemon runs beside its API:
// nil without --kubernetes.
func devicePluginFlags(c *cobra.Command, g *globals) func(log io.Writer, withMPS bool) (func(context.Context, flexgvv1.DaemonServer), error) {
	var on, mpsPods bool
	var kubeconfig, ctxMem string
	cfg := deviceplugin.Config{}
	f := c.Flags()
	f.StringVar(&g.shim, "shim", "", "with --kubernetes: path of libflexgv.so pods get (default: next to flexgv, or $FLEXGV_SHIM)")
	f.BoolVar(&on, "kubernetes", false, "also be this node's kubelet device plugin of flexgv.io/vgpu (set up by the flags that say \"with --kubernetes\")")
	f.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "with --kubernetes: this node's name in the cluster (default $NODE_NAME)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "with --kubernetes: kubeconfig of the cluster (default: the pod's service account)")
	f.StringVar(&cfg.PluginDir, "plugin-dir", pluginapi.DevicePluginPath, "with --kubernetes: the kubelet's device-plugin folder")
	f.IntVar(&cfg.Slots, "slots", 4, "with --kubernetes: vGPUs one GPU can hold")
	f.StringVar(&ctxMem, "ctx-mem", "512MiB", "with --kubernetes: device memory one CUDA context takes, charged to every pod on top of its flexgv.io/gpu-memory")
	f.StringVar(&cfg.DevRoot, "dev-root", "/dev", "with --kubernetes: where the GPUs' device nodes are")
	f.StringVar(&cfg.PodResources, "pod-resources", "/var/lib/kubelet/pod-resources/kubelet.sock",
		`with --kubernetes: the kubelet's pod-resources socket, to check that a container starts in the pod its vGPUs were set up for ("" turns the check off)`)
	f.DurationVar(&cfg.HealthEvery, "health-interval", 10*time.Second, "with --kubernetes: how often the GPUs' health is read from NVML")
	f.DurationVar(&cfg.SyncEvery, "sync-interval", 5*time.Second, "with --kubernetes: how often tenants of pods that are gone are deleted, moved remote vGPUs' addresses given to their pods and the registration with the kubelet checked")
	f.StringVar(&cfg.RemoteAddr, "remote-addr", "", "with --kubernetes: serve this node's GPUs to remote vGPUs of pods elsewhere at this address (where flexgv serve --tenant-dir listens; give --tenant-dir)")
	f.StringVar(&cfg.ServeAdmin, "serve-admin", "", "with --remote-addr: the admin socket of that flexgv serve (its --admin), through which the programs of remote pods "+
		"move to another GPU server when this node is cordoned (drained)")
	f.StringVar(&cfg.TenantDir, "tenant-dir", "", "with --remote-addr: the folder of flexgv serve --tenant-dir, where remote pods' tokens are written")
	f.StringVar(&cfg.SecretNamespace, "secret-namespace", os.Getenv("POD_NAMESPACE"), "with --remote-addr or --remote-slots: the namespace of the Secrets that carry remote pods' tokens (default $POD_NAMESPACE)")
	f.IntVar(&cfg.RemoteSlots, "remote-slots", 0, "with --kubernetes: remote vGPUs (flexgv.io/remote-vgpu) this node runs; 0: none")
	f.StringVar(&cfg.RemoteLib, "remote-lib", "", "with --remote-slots: the folder on the node holding the remoting libcuda.so.1 for containers (default: next to flexgv)")
	f.BoolVar(&mpsPods, "mps-pods", false, "with --kubernetes --mps: offer the daemon's MPS to pods that ask for flexgv.io/gpu-sm (its pipe folder "+
		"given to them): MPS carries one client's fatal GPU fault to the others on its GPU, so offer it only where the node's pods trust each other")
	f.StringVar(&cfg.CDI, "cdi", deviceplugin.CDIAuto, "with --kubernetes: give containers their GPUs as CDI devices ("+deviceplugin.CDIKind+"=INDEX or UUID; the runtime's CDI spec "+
		"brings device nodes and driver): on, off (device nodes), or auto (on where NVIDIA's CDI spec is in a --cdi-spec-dir)")
	f.StringSliceVar(&cfg.CDISpecDirs, "cdi-spec-dir", deviceplugin.CDISpecDirs, "with --kubernetes: folders of CDI specs, as the container runtime reads them")
	f.StringVar(&cfg.DriverLibs, "driver-libs", "", "with --kubernetes, for containers given device nodes: the node's folder of the driver's libraries "+
		"(libcuda.so.1, libnvidia-ml.so.1, ...), mounted into them (\"\": the container runtime brings them)")
	f.BoolVar(&cfg.SuspendPods, "suspend-pods", false, "with --kubernetes: suspend pods that allow it ("+vgpu.AnnotationPreemption+": suspend) when the scheduler extender "+
		"makes room for a pod of higher priority, instead of their eviction (the driver's checkpoint API: CUDA 12.8, driver 570 or later; the daemon must see "+
		"the pods' processes, as root in the host's PID namespace), and resume them when room returns")
	f.StringSliceVar(&cfg.GPUs, "gpus", nil, "with --kubernetes: the GPUs (UUIDs, or indices) this node's vGPUs are on, leaving the others to another "+
		"device plugin (NVIDIA's); default all. A GPU another nvidia.com/ resource advertises is left to it whatever this says")
	names := []string{"gpus", "cdi", "cdi-spec-dir", "driver-libs", "shim", "node-name", "kubeconfig", "plugin-dir", "slots", "ctx-mem", "dev-root", "pod-resources", "health-interval", "sync-interval",
		"remote-addr", "tenant-dir", "remote-slots", "secret-namespace", "remote-lib", "mps-pods", "suspend-pods", "serve-admin"}
	return func(log io.Writer, withMPS bool) (func(context.Context, flexgvv1.DaemonServer), error) {
		if !on {
			for _, n := range names {
				if f.Changed(n) {
					return nil, fmt.Errorf("--%s is a setting of the device plugin; give --kubernetes too", n)
				}
			}
			return nil, nil
		}
		ctx, err := tenant.ParseSize(ctxMem)
		if err != nil {
			return nil, fmt.Errorf("--ctx-mem: %w", err)
		}
		cfg.ContextMiB = int64(ctx >> 20)
		if mpsPods {
			if !withMPS {
				return nil, errors.New("--mps-pods offers the daemon's MPS to pods; give --mps too")
			}
			cfg.MPSPipe = mps.PipeDir() // a daemon in a pod has it mounted at the same path
		}
		if cfg.Shim, err = launch.FindShim(g.shim); err != nil {
			return nil, err
		}
		if cfg.RemoteSlots > 0 {
			if cfg.RemoteLib == "" {
				lib, err := remote.Built("libcuda.so.1")
				if err != nil {
					return nil, err
				}
				cfg.RemoteLib = filepath.Dir(lib)
			}
			cfg.RemoteTokens = filepath.Join(tenant.Dir(), "remote-tokens")
			if err := os.MkdirAll(cfg.RemoteTokens, 0o700); err != nil {
				return nil, err
			}
		}
		if err := cfg.Check(); err != nil {
			return nil, err
		}
		client, err := kubeclient.New(kubeconfig)
		if err != nil {
			return nil, err
		}
		cfg.Log = log
		// Beside the daemon's registry: one daemon per state folder.
		cfg.Allocations = filepath.Join(tenant.Dir(), "deviceplugin.allocations")
		cfg.PreloadDir = tenant.Dir()
		return func(ctx context.Context, api flexgvv1.DaemonServer) {
			p := deviceplugin.New(cfg, deviceplugin.DaemonAPI{API: api, Dir: tenant.Dir()}, client)
			if cfg.RemoteSlots > 0 {
				go p.Remote().Run(ctx)
			}
			if cfg.RemoteAddr != "" {
				go p.WatchRemote(ctx)
			}
			p.Run(ctx)
		}, nil
	}
}
