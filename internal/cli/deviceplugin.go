//go:build !nok8s

package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/flexgv/flexgv/internal/daemon"
	"github.com/flexgv/flexgv/internal/k8s/deviceplugin"
	"github.com/flexgv/flexgv/internal/k8s/kubeclient"
	"github.com/flexgv/flexgv/internal/launch"
	"github.com/flexgv/flexgv/internal/tenant"
)

func newDevicePlugin(g *globals) *cobra.Command {
	var kubeconfig, socket, ctxMem string
	cfg := deviceplugin.Config{HealthEvery: 10 * time.Second, SyncEvery: 5 * time.Second}
	c := &cobra.Command{
		Use:   "device-plugin",
		Short: "Run the kubelet device plugin of this node's vGPUs (flexgv.io/vgpu), over the node daemon",
		Long: "Registers flexgv.io/vgpu with the kubelet (--slots per GPU) and publishes the node's GPUs on its\n" +
			"Node for flexgv scheduler. For each container given vGPUs it has the node daemon (flexgv daemon,\n" +
			"on --socket) create the pod's tenant with the pod's limits on the GPUs the scheduler chose, and\n" +
			"gives the container the shim, its tenant file and the GPUs. Tenants of pods that are gone are\n" +
			"deleted. Runs until SIGTERM or SIGINT.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, err := tenant.ParseSize(ctxMem)
			if err != nil {
				return usageError{fmt.Errorf("flexgv device-plugin: --ctx-mem: %w", err)}
			}
			cfg.ContextMiB = int64(ctx >> 20)
			if cfg.Shim, err = launch.FindShim(g.shim); err != nil {
				return usageError{fmt.Errorf("flexgv device-plugin: %w", err)}
			}
			if err := cfg.Check(); err != nil {
				return usageError{fmt.Errorf("flexgv device-plugin: %w", err)}
			}
			client, err := kubeclient.New(kubeconfig)
			if err != nil {
				return usageError{fmt.Errorf("flexgv device-plugin: %w", err)}
			}
			if socket == "" {
				socket = daemon.Socket(tenant.Dir())
			}
			d, err := daemon.Connect(socket)
			if err != nil {
				return fmt.Errorf("flexgv device-plugin: the node daemon on %s: %w", socket, err)
			}
			if d == nil {
				return fmt.Errorf("flexgv device-plugin: no node daemon on %s (start flexgv daemon, or give --socket)", socket)
			}
			defer d.Close()
			cfg.Log = c.ErrOrStderr()
			sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			deviceplugin.New(cfg, deviceplugin.DaemonAPI{Client: d}, client).Run(sctx)
			return nil
		},
	}
	c.Flags().StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name in the cluster (default $NODE_NAME)")
	c.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: the pod's service account)")
	c.Flags().StringVar(&cfg.PluginDir, "plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin folder")
	c.Flags().IntVar(&cfg.Slots, "slots", 4, "vGPUs one GPU can hold")
	c.Flags().StringVar(&ctxMem, "ctx-mem", "512MiB", "device memory one CUDA context takes, charged to every pod on top of its flexgv.io/gpu-memory")
	c.Flags().StringVar(&socket, "socket", "", "the node daemon's socket (default $FLEXGV_STATE_DIR/daemon.sock)")
	c.Flags().StringVar(&cfg.DevRoot, "dev-root", "/dev", "where the GPUs' device nodes are")
	c.Flags().StringVar(&cfg.PodResources, "pod-resources", "/var/lib/kubelet/pod-resources/kubelet.sock",
		`the kubelet's pod-resources socket, to check that a container starts in the pod its vGPUs were set up for ("" turns the check off)`)
	return c
}
