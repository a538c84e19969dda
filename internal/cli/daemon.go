package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexgv/flexgv/internal/daemon"
	"github.com/flexgv/flexgv/internal/mps"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

func newDaemon(g *globals) *cobra.Command {
	var socket, metricsAddr string
	var withMPS bool
	var mpsTimeout time.Duration
	var kubernetes func(io.Writer, bool) (func(context.Context, flexgvv1.DaemonServer), error)
	c := &cobra.Command{
		Use:   "daemon",
		Short: "Run the node daemon: the owner of this node's tenants, its local API and metrics",
		Long: "Runs until SIGTERM or SIGINT. Serves the local API (gRPC, proto/flexgv/v1) on a unix socket\n" +
			"next to the tenant files, for this user and root, and Prometheus metrics on /metrics.\n" +
			"flexgv run --group --mem creates its group through the daemon when one answers: the daemon\n" +
			"then holds it until DeleteTenant, across its own restarts, with its share, cap and priority on\n" +
			"each GPU in force; flexgv update changes those live. When it stops, the tenants no run holds are\n" +
			"removed.\n\n" +
			"With --kubernetes it is also the node's kubelet device plugin: it registers flexgv.io/vgpu with\n" +
			"the kubelet (--slots per GPU) and publishes the node's GPUs on its Node for flexgv scheduler. For\n" +
			"each container given vGPUs it creates the pod's tenant with the pod's limits on the GPUs the\n" +
			"scheduler chose, and gives the container the shim, its tenant file and the GPUs. Tenants of pods\n" +
			"that are gone are deleted.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			with, err := kubernetes(c.ErrOrStderr(), withMPS)
			if err != nil {
				return usageError{fmt.Errorf("flexgv daemon: %w", err)}
			}
			if err := checkDaemonFlags(c, socket, metricsAddr); err != nil {
				return usageError{fmt.Errorf("flexgv daemon: %w", err)}
			}
			if err := checkMPSTimeout(c, withMPS, mpsTimeout); err != nil {
				return usageError{fmt.Errorf("flexgv daemon: %w", err)}
			}
			var probe []string
			if withMPS {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("flexgv daemon: --mps: cannot find flexgv itself to probe MPS with: %w", err)
				}
				probe = []string{exe, "mps-probe"}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			err = daemon.Run(ctx, daemon.Config{StateDir: tenant.Dir(), Socket: socket, MetricsAddr: metricsAddr, Log: c.ErrOrStderr(), With: with,
				MPS: withMPS, MPSProbe: probe, MPSTimeout: mpsTimeout})
			if err != nil {
				return fmt.Errorf("flexgv daemon: %w", err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&socket, "socket", "", "unix socket of the local API (default $FLEXGV_STATE_DIR/daemon.sock, where flexgv run and ps look)")
	c.Flags().StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9400", `HOST:PORT of the Prometheus endpoint /metrics ("" turns it off)`)
	c.Flags().BoolVar(&withMPS, "mps", false, "run NVIDIA's MPS control daemon (nvidia-cuda-mps-control, in $CUDA_MPS_PIPE_DIRECTORY or /tmp/nvidia-mps) while the daemon runs, "+
		"unless one runs already: processes share each GPU at once, and a tenant's --sm confines its kernels to part of the SMs. "+
		"It must first serve a CUDA program started as its client; if not, the daemon stops the control daemon it started and exits")
	c.Flags().DurationVar(&mpsTimeout, "mps-timeout", 30*time.Second, "with --mps: how long that first CUDA program may take to start")
	kubernetes = devicePluginFlags(c, g)
	return c
}

// checkMPSTimeout refuses an --mps-timeout that cannot apply.
func checkMPSTimeout(c *cobra.Command, withMPS bool, timeout time.Duration) error {
	if !c.Flags().Changed("mps-timeout") {
		return nil
	}
	if !withMPS {
		return errors.New("--mps-timeout applies only with --mps")
	}
	if timeout <= 0 {
		return fmt.Errorf("--mps-timeout %v: give a positive duration (e.g. 30s)", timeout)
	}
	return nil
}

// newMPSProbe is what flexgv daemon --mps runs, as a process of its own
// that it can kill, to check that MPS serves CUDA programs.
func newMPSProbe() *cobra.Command {
	return &cobra.Command{
		Use:    "mps-probe",
		Short:  "Start CUDA as a program does (flexgv daemon --mps runs it as an MPS client)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := mps.ProbeCUDA(); err != nil {
				return fmt.Errorf("flexgv mps-probe: %w", err)
			}
			return nil
		},
	}
}

// checkDaemonFlags refuses values the daemon could not start with, before
// it touches anything.
func checkDaemonFlags(c *cobra.Command, socket, metricsAddr string) error {
	if c.Flags().Changed("socket") {
		if socket == "" {
			return errors.New("--socket is empty; give a path")
		}
		dir := filepath.Dir(socket)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("--socket %s: the folder %s does not exist", socket, dir)
		}
	}
	if metricsAddr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(metricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %s: not HOST:PORT (e.g. 127.0.0.1:9400, or \"\" for no metrics)", metricsAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("--metrics-addr %s: the port must be a number from 0 to 65535", metricsAddr)
	}
	return nil
}

// groupViaDaemon has the node daemon, when one answers, create the group
// or take over the one there with the same quotas, so that it outlives
// this run; the run then joins it as without a daemon. It returns the
// devices to join with: the daemon's parse of --mem and --compute-max,
// which is the tenant's.
func groupViaDaemon(dir string, spec tenant.Spec, l tenant.Limits, priority, sm string) ([]tenant.DeviceQuota, error) {
	c, err := daemon.Connect(daemon.Socket(dir))
	if c == nil || err != nil {
		return spec.Devices, nil
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), daemon.CallTimeout)
	defer cancel()
	resp, err := c.CreateTenant(ctx, &flexgvv1.CreateTenantRequest{Name: spec.Name, Memory: l.Mem, ComputeMax: l.ComputeMax, Compute: l.Compute, Priority: priority, Sm: sm, ContextBytes: spec.CtxBytes})
	switch {
	case daemon.Absent(err):
		return spec.Devices, nil
	case status.Code(err) == codes.DeadlineExceeded:
		fmt.Fprintf(os.Stderr, "flexgv: warning: the daemon on %s did not answer; going on without it\n", daemon.Socket(dir))
		return spec.Devices, nil
	case err != nil:
		return nil, errors.New(daemon.Message(err))
	}
	if got := filepath.Dir(resp.Tenant.Path); got != filepath.Clean(dir) {
		return nil, otherDir(dir, got)
	}
	return daemon.Quotas(resp.Tenant), nil
}

// listViaDaemon is ListTenants of the node daemon; ok is false when none
// answers.
func listViaDaemon(dir string) (infos []tenant.Info, skipped []error, ok bool, err error) {
	c, err := daemon.Connect(daemon.Socket(dir))
	if c == nil || err != nil {
		return nil, nil, false, nil
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), daemon.CallTimeout)
	defer cancel()
	resp, err := c.ListTenants(ctx, &flexgvv1.ListTenantsRequest{})
	switch {
	case daemon.Absent(err):
		return nil, nil, false, nil
	case err != nil:
		return nil, nil, false, fmt.Errorf("the daemon on %s: %s", daemon.Socket(dir), daemon.Message(err))
	case filepath.Clean(resp.StateDir) != filepath.Clean(dir):
		return nil, nil, false, otherDir(dir, resp.StateDir)
	}
	for _, t := range resp.Tenants {
		infos = append(infos, daemon.Info(t))
	}
	for _, s := range resp.Skipped {
		skipped = append(skipped, errors.New(s))
	}
	return infos, skipped, true, nil
}

// otherDir is the error of a daemon found at dir's socket that keeps its
// tenants elsewhere (started with another --socket or state folder).
func otherDir(dir, theirs string) error {
	return fmt.Errorf("the daemon on %s keeps its tenants in %s, not in %s ($FLEXGV_STATE_DIR)", daemon.Socket(dir), theirs, dir)
}

func newRm() *cobra.Command {
	return &cobra.Command{
		Use:   "rm GROUP",
		Short: "Remove a group the node daemon holds (refused while its processes run)",
		Long: "With a node daemon running, a group created with flexgv run --group NAME --mem stays until it is\n" +
			"removed; rm asks the daemon to let go of it. A group no process is in then disappears; one that a\n" +
			"flexgv run is still in goes when that run ends. Without a daemon, groups go with their last process.",
		Args: exactlyOne,
		RunE: func(c *cobra.Command, args []string) error {
			dir := tenant.Dir()
			cl, err := daemon.Connect(daemon.Socket(dir))
			if err != nil {
				return fmt.Errorf("flexgv rm: %w", err)
			}
			if cl == nil {
				return fmt.Errorf("flexgv rm: no node daemon on %s: groups go with their last process", daemon.Socket(dir))
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), daemon.CallTimeout)
			defer cancel()
			resp, err := cl.DeleteTenant(ctx, &flexgvv1.DeleteTenantRequest{Name: args[0]})
			switch {
			case daemon.Absent(err):
				return fmt.Errorf("flexgv rm: no node daemon answers on %s: groups go with their last process", daemon.Socket(dir))
			case err != nil:
				return fmt.Errorf("flexgv rm: %s", daemon.Message(err))
			case resp.Removed:
				fmt.Fprintf(c.OutOrStdout(), "removed %s\n", args[0])
			default:
				fmt.Fprintf(c.OutOrStdout(), "released %s: it goes when the flexgv run still in it ends\n", args[0])
			}
			return nil
		},
	}
}
