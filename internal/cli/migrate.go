package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/remote"
)

func newMigrate() *cobra.Command {
	var server, to, tenantName, admin string
	var pid int
	var all bool
	var wait time.Duration
	c := &cobra.Command{
		Use:   "migrate --server ADDR --to ADDR (--tenant NAME | --pid PID | --all)",
		Short: "Move programs running on a flexgv serve to another server",
		Long: "Asks the flexgv serve listening on --server, through its admin socket, to move the programs of the\n" +
			"executors selected (a tenant's, one by its pid as the server's log names it, or all) to\n" +
			"the server at --to. Each program moves at its next CUDA call: it sees a pause and goes on on the\n" +
			"target; one that refuses stays where it was, and why is printed. A program that makes no call within\n" +
			"--wait keeps the request and moves at its next call (the server's log says so). Prints a line per\n" +
			"executor; the exit status is 0 only if every one moved. Only the server's user and root may ask.",
		Example: "  flexgv migrate --server unix:///run/a.sock --to tls://gpu-b:7070 --tenant team-a\n" +
			"  flexgv migrate --server tcp://gpu-a:7070 --to tcp://gpu-b:7070 --all --wait 5m",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			given := 0
			for _, f := range []string{"tenant", "pid", "all"} {
				if c.Flags().Changed(f) {
					given++
				}
			}
			switch {
			case server == "":
				return usageError{fmt.Errorf("flexgv migrate: --server is required: the address the server listens on")}
			case to == "":
				return usageError{fmt.Errorf("flexgv migrate: --to is required: the address of the server to move to")}
			case given != 1:
				return usageError{fmt.Errorf("flexgv migrate: give one of --tenant NAME, --pid PID or --all (got %d)", given)}
			case c.Flags().Changed("tenant") && tenantName == "":
				return usageError{fmt.Errorf("flexgv migrate: --tenant is empty; give a tenant's name")}
			case c.Flags().Changed("pid") && pid <= 0:
				return usageError{fmt.Errorf("flexgv migrate: --pid %d is not a process id", pid)}
			case c.Flags().Changed("all") && !all:
				return usageError{fmt.Errorf("flexgv migrate: --all=false selects nothing; give --tenant, --pid or --all")}
			case wait <= 0 || wait > remote.MaxMigrateWait:
				return usageError{fmt.Errorf("flexgv migrate: --wait %v: want a duration above 0, at most %v", wait, remote.MaxMigrateWait)}
			}
			from, err := remote.ParseAddr(server)
			if err != nil {
				return usageError{fmt.Errorf("flexgv migrate: --server %w", err)}
			}
			target, err := remote.ParseAddr(to)
			if err != nil {
				return usageError{fmt.Errorf("flexgv migrate: --to %w", err)}
			}
			if sameServer(from, target) {
				return usageError{fmt.Errorf("flexgv migrate: --to %s is the server the programs run on", to)}
			}
			path, err := remote.AdminPath(admin, from)
			if err != nil {
				return usageError{fmt.Errorf("flexgv migrate: --admin: %w", err)}
			}
			req := remote.AdminRequest{Op: "migrate", To: target.String(), Tenant: tenantName, Pid: pid, All: all,
				WaitMs: wait.Milliseconds()}
			a, err := remote.AdminCall(path, req)
			if err != nil {
				return exitError{1, fmt.Sprintf("flexgv migrate: cannot ask the server of %s through its admin socket %s: %v "+
					"(is it running? if it was given --admin, give the same here)", from, path, err)}
			}
			if a.Error != "" {
				return exitError{1, "flexgv migrate: the server of " + from.String() + ": " + a.Error}
			}
			out := c.OutOrStdout()
			moved := 0
			for _, r := range a.Results {
				fmt.Fprintln(out, resultLine(r, from, wait))
				if r.Outcome == remote.Moved {
					moved++
				}
			}
			if moved < len(a.Results) {
				return exitError{1, fmt.Sprintf("flexgv migrate: %d of %d executors moved", moved, len(a.Results))}
			}
			return nil
		},
	}
	c.Flags().StringVar(&server, "server", "", "the server the programs run on, as its --listen says: unix:///PATH, tcp://HOST:PORT or tls://HOST:PORT")
	c.Flags().StringVar(&to, "to", "", "the server to move them to, as their clients dial it (unix:///PATH, shm:///PATH, tcp://HOST:PORT or tls://HOST:PORT)")
	c.Flags().StringVar(&tenantName, "tenant", "", "move the executors of this tenant")
	c.Flags().IntVar(&pid, "pid", 0, "move the executor of this process id")
	c.Flags().BoolVar(&all, "all", false, "move every executor of the server")
	c.Flags().StringVar(&admin, "admin", "", "the server's admin socket, as given to flexgv serve --admin (default: derived from --server as flexgv serve does)")
	c.Flags().DurationVar(&wait, "wait", 60*time.Second, "how long to wait for each program's next call, which moves it")
	return c
}

// sameServer says whether a and b name one server (shm:// is a unix
// socket's other way in).
func sameServer(a, b remote.Addr) bool {
	local := func(n string) bool { return n == "unix" || n == "shm" }
	return a.Address == b.Address && (a.Network == b.Network || local(a.Network) && local(b.Network))
}

// resultLine says what came of one executor.
func resultLine(r remote.MigrateResult, from remote.Addr, wait time.Duration) string {
	who := fmt.Sprintf("executor %d (peer %s)", r.Pid, r.Peer)
	if r.Tenant != "" {
		who = fmt.Sprintf("executor %d (tenant %s, peer %s)", r.Pid, r.Tenant, r.Peer)
	}
	switch r.Outcome {
	case remote.Moved:
		return fmt.Sprintf("%s: moved to %s, paused %d ms", who, r.Target, r.PauseMs)
	case remote.Stayed:
		return fmt.Sprintf("%s: stayed on %s: %s", who, from, r.Reason)
	case remote.Pending:
		return fmt.Sprintf("%s: no answer within %v: the program made no call; it moves at its next one", who, wait)
	case remote.Ended:
		return fmt.Sprintf("%s: ended before moving", who)
	case remote.Refused:
		return fmt.Sprintf("%s: not asked: %s", who, r.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", who, r.Outcome, r.Reason)
}
