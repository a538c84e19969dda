package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/tenant"
)

func newPs() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ps",
		Short: "List the tenants on this machine: quotas, memory in use, processes",
		Long:  "Reads the tenants' shared state directly (no daemon needed); dead processes are not counted.",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			infos, err := tenant.List(tenant.Dir())
			if err != nil {
				return fmt.Errorf("flexgv ps: %w", err)
			}
			if asJSON {
				if infos == nil {
					infos = []tenant.Info{}
				}
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(infos)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tDEVICE\tQUOTA\tUSED\tPROCESSES")
			for _, t := range infos {
				for d, q := range t.Quota {
					var pids []string
					for _, p := range t.Procs {
						if p.Used[d] > 0 {
							pids = append(pids, fmt.Sprintf("%d(%s)", p.Pid, tenant.FormatSize(p.Used[d])))
						}
					}
					quota := "-"
					if q > 0 {
						quota = tenant.FormatSize(q)
					}
					if q == 0 && t.Used[d] == 0 {
						continue
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", t.Name, d, quota, tenant.FormatSize(t.Used[d]), strings.Join(pids, " "))
				}
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
