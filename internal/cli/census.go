package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/census"
	"github.com/flexgv/flexgv/internal/launch"
)

var skipEntry = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/([0-9]{1,3})$`)

// checkSkip accepts what the shim reads from FLEXGV_CENSUS_SKIP: "none", or
// UUID/SLOT entries (slots below 256) separated by commas.
func checkSkip(s string) error {
	if s == "none" {
		return nil
	}
	for _, e := range strings.Split(s, ",") {
		m := skipEntry.FindStringSubmatch(e)
		if m == nil {
			return fmt.Errorf("--skip: %q is not UUID/SLOT (or give none)", e)
		}
		if n, _ := strconv.Atoi(m[1]); n >= 256 {
			return fmt.Errorf("--skip: slot %d is past the 256 slots looked at", n)
		}
	}
	return nil
}

func newCensus(g *globals, stderr io.Writer) *cobra.Command {
	var (
		asJSON, combine, markdown, compare bool
		output, skip                       string
	)
	c := &cobra.Command{
		Use:   "census [flags] -- CMD [ARGS...]",
		Short: "Run a program under the shim and report which private driver tables it uses",
		Long: "Runs CMD under the shim and, when it exits, reports over all of its processes which private tables of\n" +
			"the driver (cuGetExportTable) they were handed, what each slot holds and how often each function slot\n" +
			"was called (processes that exit without running exit handlers are not counted). The exit status of\n" +
			"CMD is passed through. Without a command, on JSON reports (--json) written before:\n" +
			"  --combine NAME=REPORT...  one set of several runs, as JSON\n" +
			"  --markdown FILE           a report or a set as markdown tables\n" +
			"  --compare OLD NEW         what differs between two reports or sets; exit status 1 if anything does",
		Example: "  flexgv census -- ./app\n" +
			"  flexgv census --json -o torch.json -- python3 train.py\n" +
			"  flexgv census --combine -o cuda13.json app=app.json torch=torch.json\n" +
			"  flexgv census --compare docs/census/cuda13.json cuda13.json",
		RunE: func(c *cobra.Command, args []string) error {
			modes := 0
			for _, m := range []bool{combine, markdown, compare} {
				if m {
					modes++
				}
			}
			if modes > 1 {
				return usageError{errors.New("flexgv census: give at most one of --combine, --markdown and --compare")}
			}
			skipped := c.Flags().Changed("skip")
			if modes == 1 && (asJSON || skipped) {
				return usageError{errors.New("flexgv census: --json and --skip are for running a program")}
			}
			if skipped {
				if err := checkSkip(skip); err != nil {
					return usageError{fmt.Errorf("flexgv census: %w", err)}
				}
			}
			var out io.Writer = os.Stdout
			if modes == 0 {
				if err := needCommand(c, args); err != nil {
					return err
				}
				out = stderr
			}
			if output != "" {
				f, err := os.Create(output)
				if err != nil {
					return usageError{fmt.Errorf("flexgv census: --output: %w", err)}
				}
				defer f.Close()
				out = f
			}
			switch {
			case combine:
				return combineReports(args, out)
			case markdown:
				if len(args) != 1 {
					return usageError{errors.New("flexgv census: --markdown takes one report or set")}
				}
				s, err := census.Load(args[0])
				if err != nil {
					return fmt.Errorf("flexgv census: %w", err)
				}
				return s.WriteMarkdown(out)
			case compare:
				return compareSets(args, out)
			}
			return runCensus(g, stderr, out, args, skip, asJSON)
		},
	}
	c.Flags().SetInterspersed(false)
	c.Flags().BoolVar(&asJSON, "json", false, "write the report as JSON")
	c.Flags().StringVarP(&output, "output", "o", "", "write to this file instead of stderr (a run) or stdout")
	c.Flags().StringVar(&skip, "skip", "", "slots to leave alone, UUID/SLOT,... or none (default: the runtime's integrity-check function)")
	c.Flags().BoolVar(&combine, "combine", false, "combine NAME=REPORT arguments into one set")
	c.Flags().BoolVar(&markdown, "markdown", false, "write a report or set as markdown")
	c.Flags().BoolVar(&compare, "compare", false, "compare OLD and NEW reports or sets")
	return c
}

func runCensus(g *globals, stderr, out io.Writer, args []string, skip string, asJSON bool) error {
	dir, err := os.MkdirTemp("", "flexgv-census-")
	if err != nil {
		return fmt.Errorf("flexgv census: %w", err)
	}
	defer os.RemoveAll(dir)
	env := []string{"FLEXGV_CENSUS=" + filepath.Join(dir, "p")}
	if skip != "" {
		env = append(env, "FLEXGV_CENSUS_SKIP="+skip)
	}
	code, err := launch.Run(args, g.options(stderr, env...))
	if err != nil {
		return exitError{code, "flexgv census: " + err.Error()}
	}
	rep, err := census.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("flexgv census: %w", err)
	}
	rep.ExitCode = code
	if asJSON {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return fmt.Errorf("flexgv census: write report: %w", err)
	}
	return exitError{code, ""}
}

func combineReports(args []string, out io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("flexgv census: --combine takes NAME=REPORT arguments")}
	}
	var set census.Set
	for _, a := range args {
		name, path, ok := strings.Cut(a, "=")
		if !ok || name == "" || path == "" {
			return usageError{fmt.Errorf("flexgv census: --combine: %q is not NAME=REPORT", a)}
		}
		s, err := census.Load(path)
		if err != nil {
			return fmt.Errorf("flexgv census: %w", err)
		}
		for _, w := range s.Workloads {
			if len(s.Workloads) == 1 {
				w.Name = name
			} else {
				w.Name = name + "/" + w.Name
			}
			set.Workloads = append(set.Workloads, w)
		}
	}
	return set.WriteJSON(out)
}

func compareSets(args []string, out io.Writer) error {
	if len(args) != 2 {
		return usageError{errors.New("flexgv census: --compare takes OLD and NEW")}
	}
	old, err := census.Load(args[0])
	if err != nil {
		return fmt.Errorf("flexgv census: %w", err)
	}
	cur, err := census.Load(args[1])
	if err != nil {
		return fmt.Errorf("flexgv census: %w", err)
	}
	diffs := census.Compare(old, cur)
	if len(diffs) == 0 {
		fmt.Fprintln(out, "flexgv census: same tables, layouts, called slots and refusals")
		return nil
	}
	fmt.Fprintf(out, "flexgv census: %d differences\n%s\n", len(diffs), strings.Join(diffs, "\n"))
	return exitError{1, ""}
}
