package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/tenant"
)

// quotaFlags are the tenant options of flexgv run.
type quotaFlags struct {
	mem, group, ctxMem string
}

func (q *quotaFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&q.mem, "mem", "", "GPU memory quota: SIZE or PCT% for every device, or DEV=SIZE|PCT%,... (sizes in B, KiB, MiB, GiB, KB, MB, GB)")
	c.Flags().StringVar(&q.group, "group", "", "tenant name shared by several runs (created by the first, with --mem)")
	c.Flags().StringVar(&q.ctxMem, "ctx-mem", "512MiB", "device memory charged per CUDA context when it cannot be measured through NVML")
}

// setup creates or joins the tenant and returns the environment for the
// shim, and what to do once the program has exited.
func (q *quotaFlags) setup() ([]string, func(), error) {
	if q.mem == "" && q.group == "" {
		return nil, func() {}, nil
	}
	ctx, err := tenant.ParseSize(q.ctxMem)
	if err != nil {
		return nil, nil, fmt.Errorf("--ctx-mem: %w", err)
	}
	var quota []uint64
	if q.mem != "" {
		totals, nvmlErr := gpuinfo.Totals()
		if nvmlErr != nil {
			totals = nil
		}
		if quota, err = tenant.ParseMem(q.mem, totals, tenant.MaxDevices); err != nil {
			return nil, nil, err
		}
		if nvmlErr != nil {
			fmt.Fprintf(os.Stderr, "flexgv: warning: cannot read the devices' sizes (%v); --mem %s is not checked against them\n", nvmlErr, q.mem)
		}
	}
	name := q.group
	if name == "" {
		name = fmt.Sprintf("run-%d", os.Getpid())
	}
	t, err := tenant.Acquire(tenant.Dir(), tenant.Spec{Name: name, Quota: quota, CtxBytes: ctx})
	if err != nil {
		return nil, nil, err
	}
	return []string{"FLEXGV_TENANT=" + t.Path}, func() { t.Release() }, nil
}
