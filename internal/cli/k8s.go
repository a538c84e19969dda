//go:build !nok8s

package cli

import "github.com/spf13/cobra"

// kubernetesCommands are the Kubernetes parts; a build with the nok8s tag
// leaves them out (a binary a third the size, for GPU machines that run no
// cluster).
func kubernetesCommands() []*cobra.Command {
	return []*cobra.Command{newScheduler(), newWebhook()}
}
