//go:build !nok8s

package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/k8s/webhook"
)

func newWebhook() *cobra.Command {
	var listen, cert, key string
	w := &webhook.Webhook{}
	c := &cobra.Command{
		Use:   "webhook",
		Short: "Run the Kubernetes admission webhook that refuses pods whose vGPU requests cannot be honoured",
		Long: "Serves /validate and /mutate over HTTPS for a ValidatingWebhookConfiguration and a\n" +
			"MutatingWebhookConfiguration of pods (CREATE). Refused, with the reason: flexgv.io/gpu-memory or\n" +
			"gpu-compute without flexgv.io/vgpu, a vGPU without memory, a compute share outside 1..100, an\n" +
			"unknown flexgv.io/priority, vGPUs in init containers or in more than one container. Pods that ask\n" +
			"for vGPUs get --scheduler-name (when given) and their priority spelled out. Runs until SIGTERM or SIGINT.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if cert == "" || key == "" {
				return usageError{errors.New("flexgv webhook: --tls-cert and --tls-key are required: the API server calls webhooks over HTTPS only")}
			}
			if _, _, err := net.SplitHostPort(listen); err != nil {
				return usageError{fmt.Errorf("flexgv webhook: --listen %s: not HOST:PORT", listen)}
			}
			pair, err := webhook.LoadKeyPair(cert, key)
			if err != nil {
				return usageError{fmt.Errorf("flexgv webhook: --tls-cert/--tls-key: %w", err)}
			}
			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("flexgv webhook: %w", err)
			}
			w.Log = log.New(c.ErrOrStderr(), "flexgv webhook: ", 0)
			pair.Log = w.Log.Printf
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			srv := &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 10 * time.Second,
				TLSConfig: &tls.Config{GetCertificate: pair.GetCertificate, MinVersion: tls.VersionTLS12}}
			errc := make(chan error, 1)
			go func() { errc <- srv.ServeTLS(lis, "", "") }()
			w.Log.Printf("serving on https://%s", lis.Addr())
			select {
			case err := <-errc:
				return fmt.Errorf("flexgv webhook: %w", err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		},
	}
	c.Flags().StringVar(&listen, "listen", ":8443", "HOST:PORT to serve on")
	c.Flags().StringVar(&cert, "tls-cert", "", "the serving certificate (PEM), for the name the API server calls; read again when it changes")
	c.Flags().StringVar(&key, "tls-key", "", "its private key (PEM)")
	c.Flags().StringVar(&w.SchedulerName, "scheduler-name", "", "scheduler for pods that ask for vGPUs, the one configured with flexgv scheduler (default: leave it)")
	return c
}
