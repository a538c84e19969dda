//go:build nok8s

package cli

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

func kubernetesCommands() []*cobra.Command { return nil }

// devicePluginFlags keeps --kubernetes, to say why it cannot be had.
func devicePluginFlags(c *cobra.Command, _ *globals) func(io.Writer, bool) (func(context.Context, flexgvv1.DaemonServer), error) {
	var on bool
	c.Flags().BoolVar(&on, "kubernetes", false, "(not in this build: it was built with the nok8s tag)")
	return func(io.Writer, bool) (func(context.Context, flexgvv1.DaemonServer), error) {
		if on {
			return nil, errors.New("--kubernetes: this flexgv was built without Kubernetes support (the nok8s tag)")
		}
		return nil, nil
	}
}
