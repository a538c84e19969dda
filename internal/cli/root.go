// Package cli implements the flexgv command line.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/launch"
)

// exitError carries the exit code a command wants, and a message unless the
// program it ran already said what went wrong.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// usageError marks bad input: exit status 2.
type usageError struct{ error }

type globals struct {
	shim, driver string
}

func newRoot(stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "flexgv",
		Short:         "GPU virtualization by transparent CUDA API interception",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Suggest "trace" for "tarce": two edits away (cobra's default).
		SuggestionsMinimumDistance: 2,
		Version:                    fullVersion(),
	}
	root.SetVersionTemplate("flexgv {{.Version}}\n")
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%s: %w (see %s --help)", c.CommandPath(), err, c.CommandPath())}
	})
	// A bare flexgv shows the help; flexgv WORD that is no command is a
	// usage error like any other.
	root.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("flexgv: unknown command %q%s (see flexgv --help)", args[0], suggest(c, args[0]))}
		}
		return nil
	}
	root.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	// cobra's help command shows the root's help, exit status 0, for a
	// topic that is no command.
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || cmd == root && len(rest) > 0 {
				return usageError{fmt.Errorf("flexgv help: unknown command %q%s (see flexgv --help)", args[0], suggest(root, args[0]))}
			}
			return cmd.Help()
		},
	})
	// An empty path would silently mean the default.
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		for _, name := range []string{"shim", "driver", "output"} {
			if f := c.Flags().Lookup(name); f != nil && f.Changed && f.Value.String() == "" {
				return usageError{fmt.Errorf("%s: --%s is empty; give a path", c.CommandPath(), name)}
			}
		}
		return nil
	}
	// --shim and --driver only where a program is started under the shim
	// (the daemon's device plugin adds --shim itself).
	for _, c := range []*cobra.Command{newRun(g, stderr), newTrace(g, stderr), newCensus(g, stderr), newServe(g, stderr)} {
		c.Flags().StringVar(&g.shim, "shim", "", "path of libflexgv.so (default: next to flexgv, or $FLEXGV_SHIM)")
		c.Flags().StringVar(&g.driver, "driver", "", "CUDA driver library to load instead of libcuda.so.1")
		root.AddCommand(c)
	}
	root.AddCommand(newPs(), newRm(), newUpdate(), newSuspend(), newResume(), newMigrate(), newTop(), newBench(), newNode(), newDaemon(g), newMPSProbe(), newVersion())
	root.AddCommand(kubernetesCommands()...)
	return root
}

// suggest is cobra's "did you mean" for a mistyped command name.
func suggest(c *cobra.Command, name string) string {
	if s := c.SuggestionsFor(name); len(s) > 0 {
		return fmt.Sprintf("; did you mean %q?", s[0])
	}
	return ""
}

// noArgs is the Args check of commands that take no arguments.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		msg := fmt.Sprintf("unexpected argument %q", args[0])
		if c.HasSubCommands() {
			msg = fmt.Sprintf("unknown command %q%s", args[0], suggest(c, args[0]))
		}
		return usageError{fmt.Errorf("%s: %s (see %s --help)", c.CommandPath(), msg, c.CommandPath())}
	}
	return nil
}

// exactlyOne is the Args check of commands that take one argument, named by
// the word after the command's name in its Use.
func exactlyOne(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		what := "argument"
		if f := strings.Fields(c.Use); len(f) > 1 {
			what = f[1]
		}
		return usageError{fmt.Errorf("%s: give one %s, got %d arguments (see %s --help)", c.CommandPath(), what, len(args), c.CommandPath())}
	}
	return nil
}

// needCommand is the Args check of commands that run a program.
func needCommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageError{fmt.Errorf("%s: no command given; usage: %s [flags] -- CMD [ARGS...]", c.CommandPath(), c.CommandPath())}
	}
	return nil
}

func (g *globals) options(stderr io.Writer, env ...string) launch.Options {
	return launch.Options{Shim: g.shim, Driver: g.driver, Env: env, Stderr: stderr}
}

func newRun(g *globals, stderr io.Writer) *cobra.Command {
	var q quotaFlags
	var remoteAddr, tokenFile string
	var fo failover
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a program under the shim, optionally as a tenant with memory quotas",
		Long: "Runs CMD under the shim. With --mem (or --group) CMD and every process it starts form a tenant\n" +
			"whose GPU memory is capped: allocations past the quota fail with CUDA_ERROR_OUT_OF_MEMORY, and\n" +
			"cuMemGetInfo, cuDeviceTotalMem and NVML report the quota as the device.",
		Example: "  flexgv run --mem 8GiB -- python train.py\n" +
			"  flexgv run --mem 0=8GiB,1=25% -- ./app\n" +
			"  flexgv run --group team-a --mem 10GiB -- ./worker   # later runs: --group team-a",
		Args: needCommand,
		RunE: func(c *cobra.Command, args []string) error {
			if err := remoteAlone(c, remoteAddr); err != nil {
				return err
			}
			foEnv, err := fo.env(c, remoteAddr)
			if err != nil {
				return err
			}
			env, done, err := q.setup()
			if err != nil {
				return usageError{fmt.Errorf("flexgv run: %w", err)}
			}
			defer done()
			o := g.options(stderr, env...)
			if remoteAddr != "" {
				if err := remoteRun(remoteAddr, tokenFile, &o); err != nil {
					return err
				}
				o.Env = append(o.Env, foEnv...)
			}
			code, err := launch.Run(args, o)
			if err != nil {
				return exitError{code, "flexgv run: " + err.Error()}
			}
			return exitError{code, ""}
		},
	}
	c.Flags().SetInterspersed(false)
	q.register(c)
	c.Flags().StringVar(&remoteAddr, "remote", "", "run on the GPUs of flexgv serve at ADDR (unix:///PATH, shm:///PATH for the same socket through shared memory, tcp://HOST:PORT or tls://HOST:PORT)")
	c.Flags().StringVar(&tokenFile, "token-file", "", "with --remote: the file holding the tenant's token the server gave (default: $FLEXGV_REMOTE_TOKEN_FILE)")
	fo.register(c)
	return c
}

// Main runs the CLI and returns the process exit status.
func Main(args []string) int {
	return execute(args, os.Stdout, os.Stderr)
}

// execute runs the CLI with its output to stdout and stderr.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stderr)
	root.SetOut(stdout)
	root.SetArgs(args)
	err := root.Execute()
	var ee exitError
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(stderr, ee.msg)
		}
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, ue.error)
		return 2
	}
	fmt.Fprintln(stderr, err)
	return 1
}
