package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/tenant"
	"github.com/flexgv/flexgv/internal/top"
)

// Bounds of flexgv top's --interval: shorter is noise, longer is no view.
const (
	minTopInterval = 100 * time.Millisecond
	maxTopInterval = time.Hour
)

func newTop() *cobra.Command {
	var once, asJSON bool
	var interval time.Duration
	c := &cobra.Command{
		Use:   "top",
		Short: "Live view of the GPUs and their tenants: share of GPU time asked and achieved, memory, processes, throttling",
		Long: "Shows each GPU (memory and utilization from NVML when available) and its tenants: the share of the\n" +
			"GPU's time guaranteed to each and the share it achieved over the last interval, as bars (# achieved,\n" +
			"| the target), its cap and priority, memory used and quota, processes, the time its processes waited\n" +
			"to launch (in all, and as a share of the interval) and the turns it lost to a higher priority;\n" +
			"* marks the tenant holding the GPU. Reads the state folder directly: works with or without the\n" +
			"node daemon. q, Esc or Ctrl-C quits. --once prints one snapshot, the shares achieved over --interval\n" +
			"(--json: as JSON, sizes in bytes, shares and caps in hundredths of a percent, rates as fractions).",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if asJSON && !once {
				return usageError{fmt.Errorf("flexgv top: --json prints a snapshot; give --once too")}
			}
			if interval < minTopInterval || interval > maxTopInterval {
				return usageError{fmt.Errorf("flexgv top: --interval %v: give a duration from %v to %v", interval, minTopInterval, maxTopInterval)}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			src := top.Source{Dir: tenant.Dir(), Devices: gpuinfo.Devices}
			var err error
			if once {
				err = top.Once(ctx, src, interval, c.OutOrStdout(), asJSON)
			} else {
				if !isTerminal(os.Stdin) || !isTerminal(os.Stdout) {
					return usageError{fmt.Errorf("flexgv top: the live view needs a terminal; use --once for a snapshot as text")}
				}
				err = top.Run(ctx, src, interval, os.Stdin, c.OutOrStdout())
			}
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("flexgv top: %w", err)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&once, "once", false, "print one snapshot as text and exit")
	c.Flags().BoolVar(&asJSON, "json", false, "with --once: print the snapshot as JSON")
	c.Flags().DurationVar(&interval, "interval", time.Second, "time between snapshots; the shares achieved are over it")
	return c
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
