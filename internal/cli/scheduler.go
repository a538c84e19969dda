//go:build !nok8s

package cli

import (
	"context"
	"fmt"
	"net"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/k8s/extender"
	"github.com/flexgv/flexgv/internal/k8s/kubeclient"
	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

func newScheduler() *cobra.Command {
	var listen, kubeconfig, policy string
	c := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the Kubernetes scheduler extender that places pods' vGPUs on GPUs with room",
		Long: "Serves kube-scheduler's extender verbs filter, prioritize and bind over HTTP (urlPrefix\n" +
			"http://HOST:PORT, nodeCacheCapable: true, managedResources flexgv.io/vgpu). A pod asking for\n" +
			"flexgv.io/vgpu goes only where a GPU has its flexgv.io/gpu-memory plus a CUDA context and its\n" +
			"flexgv.io/gpu-compute free; the GPUs chosen are recorded on the pod (flexgv.io/gpus) with its\n" +
			"binding. Runs until SIGTERM or SIGINT.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := vgpu.ParsePolicy(policy)
			if err != nil {
				return usageError{fmt.Errorf("flexgv scheduler: --policy: %w", err)}
			}
			if _, _, err := net.SplitHostPort(listen); err != nil {
				return usageError{fmt.Errorf("flexgv scheduler: --listen %s: not HOST:PORT", listen)}
			}
			client, err := kubeclient.New(kubeconfig)
			if err != nil {
				return usageError{fmt.Errorf("flexgv scheduler: %w", err)}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			e := extender.New(client, p, c.ErrOrStderr())
			if err := e.Start(ctx); err != nil {
				return fmt.Errorf("flexgv scheduler: %w", err)
			}
			fmt.Fprintf(c.ErrOrStderr(), "flexgv scheduler: %s placement, serving on http://%s\n", p, listen)
			if err := extender.Serve(ctx, e, listen); err != nil {
				return fmt.Errorf("flexgv scheduler: %w", err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&listen, "listen", ":8888", "HOST:PORT to serve the extender verbs on")
	c.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: the pod's service account)")
	c.Flags().StringVar(&policy, "policy", string(vgpu.Binpack), "placement: binpack (fullest GPU first) or spread (emptiest first)")
	return c
}
