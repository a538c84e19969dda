package cli

import (
	"strings"
	"testing"
)

// flexgv run --failover's flags: wrong ones are said, exit status 2, and
// the program never starts (it would print).
func TestRunFailoverFlags(t *testing.T) {
	prog := []string{"--", "sh", "-c", "echo started"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--failover", "unix:///tmp/b.sock"}, "flexgv run: --failover is for remote programs (--remote ADDR)"},
		{[]string{"--remote", "unix:///tmp/a.sock", "--failover", ""}, "flexgv run: --failover is empty; give the failover server's address"},
		{[]string{"--remote", "unix:///tmp/a.sock", "--checkpoint-every", "1s"}, "flexgv run: --checkpoint-every is for --failover ADDR2"},
		{[]string{"--remote", "unix:///tmp/a.sock", "--failover", "b.sock"}, `flexgv run: --failover address "b.sock": no scheme`},
		{[]string{"--remote", "unix:///tmp/a.sock", "--failover", "unix:///tmp/b.sock", "--checkpoint-every", "0s"}, "flexgv run: --checkpoint-every 0s: want 1ms to 24h"},
		{[]string{"--remote", "unix:///tmp/a.sock", "--failover", "unix:///tmp/b.sock", "--checkpoint-every", "25h"}, "flexgv run: --checkpoint-every 25h0m0s: want 1ms to 24h"},
		{[]string{"--remote", "unix:///tmp/a.sock", "--failover", "unix:///tmp/b.sock,"}, `flexgv run: --failover address "": no scheme`},
		{[]string{"--remote", "unix:///tmp/a.sock", "--failover", "unix:///tmp/b.sock,http://c:80"}, `flexgv run: --failover address "http://c:80"`},
		{[]string{"--remote", "unix:///tmp/a.sock", "--failover", strings.Repeat("unix:///tmp/b.sock,", 8) + "unix:///tmp/c.sock"}, "flexgv run: --failover names 9 servers: at most 8"},
	} {
		code, out, errs := runCLI(append(append([]string{"run"}, c.args...), prog...)...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(out, "started") {
			t.Errorf("flexgv run %v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errs, c.want)
		}
	}
}
