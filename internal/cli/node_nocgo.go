//go:build !cgo

package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// Without cgo there is no NVML; every other command works.
func newNode() *cobra.Command {
	return &cobra.Command{
		Use:   "node",
		Short: "Show this node's GPUs (needs a build with cgo)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("flexgv node: this flexgv was built without cgo, so it cannot use NVML")
		},
	}
}
