package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/daemon"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

func newUpdate() *cobra.Command {
	var compute, computeMax, priority, sm, mem string
	c := &cobra.Command{
		Use:   "update TENANT [--compute SPEC] [--compute-max SPEC] [--priority P] [--sm PCT|all]",
		Short: "Change a tenant's GPU time shares, caps, priority or SMs while it runs (through the node daemon)",
		Long: "Asks the node daemon to change a live tenant's compute policy. Its running processes follow at\n" +
			"their next launch; processes started later, and flexgv ps, see the new values. Devices not named\n" +
			"keep theirs; \"none\" in place of a percentage removes a share or cap. Shares of one GPU may not\n" +
			"add up to more than 100 %. Memory quotas cannot change: each process reads them once, at its start.\n" +
			"Nor can a running process's SMs under MPS: --sm is for the tenant's processes that start later.",
		Example: "  flexgv update team-a --compute 0=40% --priority high\n" +
			"  flexgv update team-b --compute-max none",
		Args: exactlyOne,
		RunE: func(c *cobra.Command, args []string) error {
			fail := func(err error) error { return usageError{fmt.Errorf("flexgv update: %w", err)} }
			if c.Flags().Changed("mem") {
				return fail(errors.New("--mem: memory quotas cannot change while a tenant lives: each process's shim reads them once, at its start; make the group anew to change them"))
			}
			if !c.Flags().Changed("compute") && !c.Flags().Changed("compute-max") && !c.Flags().Changed("priority") && !c.Flags().Changed("sm") {
				return fail(errors.New("nothing to change; give --compute, --compute-max, --priority or --sm"))
			}
			for _, f := range []struct{ name, v string }{{"compute", compute}, {"compute-max", computeMax}, {"priority", priority}, {"sm", sm}} {
				if c.Flags().Changed(f.name) && f.v == "" {
					return fail(fmt.Errorf("--%s is empty", f.name))
				}
			}
			if priority != "" {
				if _, err := sched.ParsePriority(priority); err != nil {
					return fail(err)
				}
			}
			if sm != "" && sm != "all" {
				if _, err := tenant.ParseSM(sm); err != nil {
					return fail(fmt.Errorf(`%w, or "all"`, err))
				}
			}
			if err := tenant.CheckName(args[0]); err != nil {
				return fail(err)
			}
			dir := tenant.Dir()
			noDaemon := fmt.Errorf("flexgv update: no node daemon answers on %s; start flexgv daemon to change policies live (without it a group keeps the policy it was made with)", daemon.Socket(dir))
			cl, err := daemon.Connect(daemon.Socket(dir))
			if err != nil {
				return fmt.Errorf("flexgv update: %w", err)
			}
			if cl == nil {
				return noDaemon
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), daemon.CallTimeout)
			defer cancel()
			resp, err := cl.UpdateTenant(ctx, &flexgvv1.UpdateTenantRequest{Name: args[0], Compute: compute, ComputeMax: computeMax, Priority: priority, Sm: sm})
			switch {
			case daemon.Absent(err):
				return noDaemon
			case err != nil:
				return fmt.Errorf("flexgv update: %s", daemon.Message(err))
			}
			return printTenants(c.OutOrStdout(), []tenant.Info{daemon.Info(resp.Tenant)})
		},
	}
	c.Flags().StringVar(&compute, "compute", "", "new guaranteed shares: PCT% for every device, or DEV=PCT%,... (\"none\" removes)")
	c.Flags().StringVar(&computeMax, "compute-max", "", "new caps: PCT% for every device, or DEV=PCT%,... (\"none\" removes)")
	c.Flags().StringVar(&priority, "priority", "", "new priority: low, normal, high, or 0 to 9")
	c.Flags().StringVar(&sm, "sm", "", "new percentage of each GPU's SMs under MPS for processes that start later, or \"all\"")
	c.Flags().StringVar(&mem, "mem", "", "refused: memory quotas cannot change")
	c.Flags().MarkHidden("mem")
	return c
}
