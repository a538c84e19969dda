package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

func newPs() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ps",
		Short: "List the tenants on this machine: quotas, memory in use, GPU time shares, caps, priority, processes",
		Long: "Asks the node daemon when one answers, else reads the tenants' shared state directly; the two\n" +
			"show the same. Dead processes are not counted. Tenants no process is left in are removed; files\n" +
			"that are not tenants are reported and skipped.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			dir := tenant.Dir()
			infos, bad, ok, err := listViaDaemon(dir)
			if !ok && err == nil {
				infos, bad, err = tenant.List(dir)
			}
			if err != nil {
				return fmt.Errorf("flexgv ps: %w", err)
			}
			for _, e := range bad {
				fmt.Fprintf(c.ErrOrStderr(), "flexgv ps: warning: skipped %v\n", e)
			}
			if asJSON {
				if infos == nil {
					infos = []tenant.Info{}
				}
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(infos)
			}
			return printTenants(c.OutOrStdout(), infos)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (with full device UUIDs)")
	return c
}

// printTenants prints one row per device a tenant limits or uses: memory
// quota and use, GPU time share and cap, the tenant's priority and SM
// percentage under MPS, processes,
// and whom it is for where the daemon was told (a pod: NAMESPACE/POD/CONTAINER).
func printTenants(w io.Writer, infos []tenant.Info) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	labelled := slices.ContainsFunc(infos, func(t tenant.Info) bool { return len(t.Labels) > 0 })
	head := "TENANT\tDEVICE\tQUOTA\tUSED\tSHARE\tCAP\tPRIORITY\tSMS\tPROCESSES"
	if labelled {
		head += "\tFOR"
	}
	fmt.Fprintln(tw, head)
	for _, t := range infos {
		for _, d := range t.Devices {
			if d.Quota == 0 && d.Used == 0 && d.Share == 0 && d.ComputeMax == 0 && t.Priority == sched.PriorityNormal && t.SM == 0 {
				continue
			}
			quota, share, limit, sms := "-", "-", "-", "-"
			if t.SM > 0 {
				sms = fmt.Sprintf("%d%%", t.SM)
			}
			if d.Quota > 0 {
				quota = tenant.FormatSize(d.Quota)
			}
			if d.Share > 0 {
				share = sched.Percent(d.Share)
			}
			if d.ComputeMax > 0 {
				limit = sched.Percent(d.ComputeMax)
			}
			var pids []string
			for _, p := range t.Procs {
				if p.Used[d.Index] > 0 {
					state := ""
					if p.Suspended {
						state = " suspended"
					}
					pids = append(pids, fmt.Sprintf("%d(%s%s)", p.Pid, tenant.FormatSize(p.Used[d.Index]), state))
				}
			}
			row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", t.Name, deviceLabel(d), quota, tenant.FormatSize(d.Used),
				share, limit, sched.PriorityName(t.Priority), sms, strings.Join(pids, " "))
			if labelled {
				row += "\t" + forLabel(t.Labels)
			}
			fmt.Fprintln(tw, row)
		}
	}
	return tw.Flush()
}

// forLabel is whom a tenant is for: NAMESPACE/POD/CONTAINER, "-" if unknown.
func forLabel(l map[string]string) string {
	var parts []string
	for _, k := range []string{"namespace", "pod", "container"} {
		if v := l[k]; v != "" {
			parts = append(parts, v)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "/")
}

// deviceLabel is the entry's index and the start of its UUID, to keep rows
// short (--json has the whole UUID).
func deviceLabel(d tenant.DeviceUse) string {
	const short = len("GPU-12345678")
	if len(d.UUID) > short {
		return fmt.Sprintf("%d %s", d.Index, d.UUID[:short])
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s", d.Index, d.UUID))
}
