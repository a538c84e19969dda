package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/launch"
	"github.com/flexgv/flexgv/internal/trace"
)

// maxSlots bounds the trace region's size: each slot holds counters for
// every entry point.
const maxSlots = 1 << 16

func newTrace(g *globals, stderr io.Writer) *cobra.Command {
	var (
		asJSON, log bool
		output      string
		slots       int
	)
	c := &cobra.Command{
		Use:   "trace [flags] -- CMD [ARGS...]",
		Short: "Run a program under the shim and summarize its driver calls",
		Long: "Runs CMD under the shim and, when it exits, prints one summary over all of its processes\n" +
			"(children, workers, exec'd programs): calls, errors, time in the driver and bytes per API.\n" +
			"The exit status of CMD is passed through.",
		Args: needCommand,
		RunE: func(c *cobra.Command, args []string) error {
			if slots < 2 || slots > maxSlots {
				return usageError{fmt.Errorf("flexgv trace: --slots must be at least 2 and at most %d, got %d", maxSlots, slots)}
			}
			var out io.Writer = stderr
			if output != "" {
				f, err := os.Create(output)
				if err != nil {
					return usageError{fmt.Errorf("flexgv trace: --output: %w", err)}
				}
				defer f.Close()
				out = f
			}
			region, err := trace.Create(trace.DefaultDir(), slots)
			if err != nil {
				return fmt.Errorf("flexgv trace: %w", err)
			}
			defer region.Remove()
			env := []string{"FLEXGV_TRACE=" + region.Path}
			if log {
				env = append(env, "FLEXGV_LOG=1")
			}
			code, err := launch.Run(args, g.options(stderr, env...))
			if err != nil {
				return exitError{code, "flexgv trace: " + err.Error()}
			}
			sum := region.Summarize()
			sum.ExitCode = code
			if asJSON {
				err = sum.WriteJSON(out)
			} else {
				err = sum.WriteText(out)
			}
			if err != nil {
				return fmt.Errorf("flexgv trace: write summary: %w", err)
			}
			return exitError{code, ""}
		},
	}
	c.Flags().SetInterspersed(false)
	c.Flags().BoolVar(&asJSON, "json", false, "print the summary as JSON")
	c.Flags().BoolVar(&log, "log", false, "print one line per driver call as it happens (on stderr)")
	c.Flags().StringVarP(&output, "output", "o", "", "write the summary to this file instead of stderr")
	c.Flags().IntVar(&slots, "slots", 1024, "most processes traced separately")
	return c
}
