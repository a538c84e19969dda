//go:build nok8s

package cli

import "github.com/spf13/cobra"

func kubernetesCommands(*globals) []*cobra.Command { return nil }
