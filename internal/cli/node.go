package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/tenant"
)

// nodeGPU is one GPU in flexgv node --json: sizes in bytes.
type nodeGPU struct {
	Index     int    `json:"index"`
	Name      string `json:"name"`
	UUID      string `json:"uuid"`
	MemUsed   uint64 `json:"memory_used"`
	MemTotal  uint64 `json:"memory_total"`
	Util      uint32 `json:"utilization"` // percent
	Processes int    `json:"processes"`
}

func newNode() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "node",
		Short: "Show this node's GPUs as NVML reports them",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			devs, err := gpuinfo.Devices()
			if err != nil {
				return fmt.Errorf("flexgv node: %w", err)
			}
			if asJSON {
				out := []nodeGPU{}
				for _, d := range devs {
					out = append(out, nodeGPU{d.Index, d.Name, d.UUID, d.Used, d.Total, d.Util, d.Processes})
				}
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "GPU\tNAME\tUUID\tMEMORY USED\tMEMORY TOTAL\tUTIL\tPROCESSES")
			for _, d := range devs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d%%\t%d\n", d.Index, d.Name, d.UUID, tenant.FormatSize(d.Used),
					tenant.FormatSize(d.Total), d.Util, d.Processes)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (sizes in bytes)")
	return c
}
