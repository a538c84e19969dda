package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/suspend"
	"github.com/flexgv/flexgv/internal/tenant"
)

func newSuspend() *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "suspend TENANT",
		Short: "Take a tenant's processes off the GPU: their device memory moves to host memory until resume",
		Long: "Locks every CUDA process of the tenant through the driver's process checkpoint API (CUDA 12.8,\n" +
			"driver 570 or later), which waits for the work they submitted, then checkpoints them: their\n" +
			"device memory moves into their host memory and the GPU's is free. Their CUDA calls block until\n" +
			"flexgv resume (onto the same GPU, or with --gpu another); nothing else about them stops. See\n" +
			"docs/SUSPEND.md for the limits.",
		Example: "  flexgv suspend team-a\n  flexgv resume team-a",
		Args:    exactlyOne,
		RunE: func(c *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageError{fmt.Errorf("flexgv suspend: --timeout %v is negative", timeout)}
			}
			return suspendTenant(c, args[0], timeout)
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for each process's submitted work (0: no limit)")
	return c
}

func newResume() *cobra.Command {
	var gpu string
	c := &cobra.Command{
		Use:   "resume TENANT",
		Short: "Bring a suspended tenant's processes back onto the GPU and let them run",
		Long: "Checks that the GPU has the tenant's memory quota free (its usage where it has no quota), then\n" +
			"restores each suspended process's device memory and unlocks it: its blocked CUDA calls go on.\n" +
			"With --gpu, restores them onto that GPU of the node instead of the one they left (a tenant on\n" +
			"one GPU; CUDA 13.0, driver 580 or later): the target must have the tenant's quota free.",
		Example: "  flexgv resume team-a\n  flexgv resume team-a --gpu GPU-5d1e...",
		Args:    exactlyOne,
		RunE:    func(c *cobra.Command, args []string) error { return resumeTenant(c, args[0], gpu) },
	}
	c.Flags().StringVar(&gpu, "gpu", "", "restore onto this GPU of the node: its UUID (preferred) or NVML index")
	return c
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func suspendTenant(c *cobra.Command, name string, timeout time.Duration) error {
	if err := tenant.CheckName(name); err != nil {
		return usageError{fmt.Errorf("flexgv suspend: %w", err)}
	}
	r, err := suspend.Suspend(tenant.Dir(), name, timeout, c.ErrOrStderr())
	if err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "suspended tenant %s: %s, %s off the GPU in %s (%s waiting for submitted work)\n", name,
		plural(r.Procs, "process", "processes"), tenant.FormatSize(r.Bytes), r.Took.Round(time.Millisecond), r.Waited.Round(time.Millisecond))
	return nil
}

func resumeTenant(c *cobra.Command, name, gpu string) error {
	if err := tenant.CheckName(name); err != nil {
		return usageError{fmt.Errorf("flexgv resume: %w", err)}
	}
	r, err := suspend.Resume(tenant.Dir(), name, gpu, c.ErrOrStderr())
	if err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "resumed tenant %s: %s, %s back on %s in %s\n", name, plural(r.Procs, "process", "processes"),
		tenant.FormatSize(r.Bytes), r.Where, r.Took.Round(time.Millisecond))
	return nil
}
