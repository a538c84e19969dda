package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at build time by the Makefile with -ldflags "-X ...cli.Commit=...":
// the commit (with -dirty for a modified tree) and the build date. Version
// is a release's name, where one is given (make VERSION=...).
var (
	Version   = "dev"
	Commit    = ""
	BuildDate = ""
)

// versionLine is what flexgv version prints. A build without the Makefile's
// flags (go install, go build) falls back on the commit and commit time Go
// stamps into the binary.
func versionLine(bi *debug.BuildInfo, ok bool) string {
	commit, date := Commit, BuildDate
	if commit == "" && ok {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
				if len(commit) > 12 {
					commit = commit[:12]
				}
			case "vcs.time":
				date = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if commit != "" && modified {
			commit += "-dirty"
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	if date == "" {
		date = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, built %s)", Version, commit, date)
}

func fullVersion() string { return versionLine(debug.ReadBuildInfo()) }

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit it was built from and the build date",
		Args:  noArgs,
		Run:   func(c *cobra.Command, _ []string) { fmt.Fprintln(c.OutOrStdout(), "flexgv", fullVersion()) },
	}
}
