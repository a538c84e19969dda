package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/shareplot"
	"github.com/flexgv/flexgv/internal/tenant"
)

func newBench() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure what flexgv gives tenants",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return usageError{errors.New("flexgv bench: give what to measure: share")}
		},
	}
	c.AddCommand(newBenchShare())
	return c
}

func newBenchShare() *cobra.Command {
	var gpu, svg, csvOut, from, title string
	var duration, interval time.Duration
	c := &cobra.Command{
		Use:   "share --svg FILE [--gpu DEV] [--duration D] [--interval I] [--csv FILE] | --from CSV --svg FILE",
		Short: "Record each tenant's share of a GPU's time against its target, plot it as SVG",
		Long: "Reads the GPU's scheduler every --interval for --duration (or until SIGINT) while tenants run, and writes\n" +
			"an SVG of each tenant's achieved share of the GPU's time per interval (solid) next to its target\n" +
			"(dashed); prints per tenant the mean share achieved and targeted, and the mean and 95th percentile of\n" +
			"|achieved - target| over the intervals. --csv keeps the samples; --from plots samples kept before.",
		Example: "  flexgv bench share --gpu 0 --duration 60s --svg share.svg --csv share.csv\n" +
			"  flexgv bench share --from share.csv --svg share.svg",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fail := func(format string, args ...any) error {
				return usageError{fmt.Errorf("flexgv bench share: "+format, args...)}
			}
			switch {
			case svg == "":
				return fail("--svg is missing or empty; give the plot's file")
			case from != "" && (c.Flags().Changed("gpu") || c.Flags().Changed("duration") || c.Flags().Changed("interval") || csvOut != ""):
				return fail("--from plots recorded samples: --gpu, --duration, --interval and --csv do not go with it")
			case c.Flags().Changed("from") && from == "":
				return fail("--from is empty; give a CSV of samples")
			case interval < 10*time.Millisecond:
				return fail("--interval %v: at least 10ms", interval)
			case duration < 2*interval:
				return fail("--duration %v: at least two intervals (%v)", duration, 2*interval)
			}
			var samples []shareplot.Sample
			if from != "" {
				f, err := os.Open(from)
				if err != nil {
					return fmt.Errorf("flexgv bench share: %w", err)
				}
				samples, err = shareplot.ReadCSV(f)
				f.Close()
				if err != nil {
					return fmt.Errorf("flexgv bench share: %s: %w", from, err)
				}
				if title == "" {
					title = filepath.Base(from)
				}
			} else {
				dir := tenant.Dir()
				uuid, err := pickGPU(dir, gpu)
				if err != nil {
					return fail("%v", err)
				}
				ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
				defer stop()
				samples, err = shareplot.Record(ctx, dir, uuid, interval, duration)
				if err != nil {
					return fmt.Errorf("flexgv bench share: %w", err)
				}
				if title == "" {
					title = fmt.Sprintf("%s, %v windows", uuid, interval)
				}
				if csvOut != "" {
					if err := writeFile(csvOut, func(f *os.File) error { return shareplot.WriteCSV(f, samples) }); err != nil {
						return fmt.Errorf("flexgv bench share: %w", err)
					}
				}
			}
			series := shareplot.Windows(samples)
			if err := writeFile(svg, func(f *os.File) error { return shareplot.SVG(f, title, series) }); err != nil {
				return fmt.Errorf("flexgv bench share: %w", err)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tWINDOWS\tTARGET\tACHIEVED\tMEAN |ERROR|\tP95 |ERROR|")
			for _, s := range shareplot.Summary(series) {
				fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.1f%%\t%.2f pp\t%.2f pp\n", s.Tenant, s.Windows, s.Target*100, s.Achieved*100, s.MeanError*100, s.P95Error*100)
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&gpu, "gpu", "", "the GPU: NVML index or UUID (default: the one GPU with a scheduler)")
	c.Flags().DurationVar(&duration, "duration", 30*time.Second, "how long to record")
	c.Flags().DurationVar(&interval, "interval", time.Second, "window over which each share achieved is measured")
	c.Flags().StringVar(&svg, "svg", "", "the plot to write")
	c.Flags().StringVar(&csvOut, "csv", "", "also write the samples to this CSV file")
	c.Flags().StringVar(&from, "from", "", "plot the samples of this CSV file instead of recording")
	c.Flags().StringVar(&title, "title", "", "the plot's title")
	return c
}

// pickGPU finds the UUID of the GPU spec names (NVML index or UUID); with
// none, the one GPU of the state folder that has a scheduler.
func pickGPU(dir, spec string) (string, error) {
	if strings.HasPrefix(strings.ToUpper(spec), "GPU-") || strings.HasPrefix(strings.ToUpper(spec), "MIG-") {
		return spec, nil
	}
	if spec != "" {
		i, err := strconv.Atoi(spec)
		if err != nil || i < 0 {
			return "", fmt.Errorf("--gpu %q: give an NVML index or a GPU UUID", spec)
		}
		gpus, err := gpuinfo.GPUs()
		if err != nil {
			return "", fmt.Errorf("--gpu %s: an index needs NVML (%v); give the GPU's UUID", spec, err)
		}
		if i >= len(gpus) {
			return "", fmt.Errorf("--gpu %d: there is no GPU %d (%d GPUs)", i, i, len(gpus))
		}
		return gpus[i].UUID, nil
	}
	gs, _, err := sched.List(dir)
	if err != nil {
		return "", err
	}
	switch len(gs) {
	case 0:
		return "", fmt.Errorf("no GPU has a scheduler in %s yet: start tenants with --compute, --compute-max or --priority first", dir)
	case 1:
		return gs[0].UUID, nil
	}
	var ids []string
	for _, g := range gs {
		ids = append(ids, g.UUID)
	}
	return "", fmt.Errorf("%d GPUs have a scheduler (%s): give --gpu", len(gs), strings.Join(ids, ", "))
}

// writeFile writes a file whole through fill, or reports why not.
func writeFile(p string, fill func(*os.File) error) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p)
	}
	return err
}
