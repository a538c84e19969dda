//go:build cgo

package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"
)

func newNode() *cobra.Command {
	return &cobra.Command{
		Use:   "node",
		Short: "Show this node's GPUs as NVML reports them",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return showNode(c.OutOrStdout())
		},
	}
}

func nvmlErr(what string, r nvml.Return) error {
	return fmt.Errorf("flexgv node: %s: %s", what, nvml.ErrorString(r))
}

func showNode(w io.Writer) error {
	if r := nvml.Init(); r != nvml.SUCCESS {
		return nvmlErr("cannot initialize NVML (is the NVIDIA driver, or the simulated GPU, on the library path?)", r)
	}
	defer nvml.Shutdown()
	n, r := nvml.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nvmlErr("device count", r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tUUID\tMEMORY USED\tMEMORY TOTAL\tUTIL\tPROCESSES")
	for i := 0; i < n; i++ {
		d, r := nvml.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nvmlErr(fmt.Sprintf("device %d", i), r)
		}
		name, _ := d.GetName()
		uuid, _ := d.GetUUID()
		mem, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return nvmlErr(fmt.Sprintf("device %d memory", i), r)
		}
		util, _ := d.GetUtilizationRates()
		procs, _ := d.GetComputeRunningProcesses()
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d MiB\t%d MiB\t%d%%\t%d\n", i, name, uuid, mem.Used>>20, mem.Total>>20, util.Gpu, len(procs))
	}
	return tw.Flush()
}
