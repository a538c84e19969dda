package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/gpuinfo"
)

func newNode() *cobra.Command {
	return &cobra.Command{
		Use:   "node",
		Short: "Show this node's GPUs as NVML reports them",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			devs, err := gpuinfo.Devices()
			if err != nil {
				return fmt.Errorf("flexgv node: %w", err)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "GPU\tNAME\tUUID\tMEMORY USED\tMEMORY TOTAL\tUTIL\tPROCESSES")
			for _, d := range devs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d MiB\t%d MiB\t%d%%\t%d\n", d.Index, d.Name, d.UUID, d.Used>>20, d.Total>>20, d.Util, d.Processes)
			}
			return tw.Flush()
		},
	}
}
