package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexgv/flexgv/internal/remote"
)

func runCLI(args ...string) (int, string, string) {
	var out, errb strings.Builder
	code := execute(args, &out, &errb)
	return code, out.String(), errb.String()
}

// Bad or missing flags: a message saying which, exit status 2, and no
// server is asked (none listens at the socket's path).
func TestMigrateFlags(t *testing.T) {
	srv := "unix://" + filepath.Join(t.TempDir(), "a.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "unix:///tmp/b.sock", "--all"}, "flexgv migrate: --server is required: the address the server listens on"},
		{[]string{"--server", srv, "--all"}, "flexgv migrate: --to is required: the address of the server to move to"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock"}, "flexgv migrate: give one of --tenant NAME, --pid PID or --all (got 0)"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--all", "--tenant", "a"}, "flexgv migrate: give one of --tenant NAME, --pid PID or --all (got 2)"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--pid", "3", "--tenant", "a", "--all"}, "flexgv migrate: give one of --tenant NAME, --pid PID or --all (got 3)"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--tenant", ""}, "flexgv migrate: --tenant is empty; give a tenant's name"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--pid", "0"}, "flexgv migrate: --pid 0 is not a process id"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--all=false"}, "flexgv migrate: --all=false selects nothing; give --tenant, --pid or --all"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--all", "--wait", "0s"}, "flexgv migrate: --wait 0s: want a duration above 0, at most 1h0m0s"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--all", "--wait", "-1s"}, "flexgv migrate: --wait -1s: want a duration above 0, at most 1h0m0s"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--all", "--wait", "2h"}, "flexgv migrate: --wait 2h0m0s: want a duration above 0, at most 1h0m0s"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--all", "--wait", "soon"}, `flexgv migrate: invalid argument "soon" for "--wait" flag: time: invalid duration "soon" (see flexgv migrate --help)`},
		{[]string{"--server", srv, "--to", "b.sock", "--all"}, `flexgv migrate: --to address "b.sock": no scheme (want unix:///PATH, shm:///PATH, tcp://HOST:PORT or tls://HOST:PORT)`},
		{[]string{"--server", "tcp://a", "--to", "unix:///tmp/b.sock", "--all"}, `flexgv migrate: --server address "tcp://a": address a: missing port in address (want unix:///PATH, shm:///PATH, tcp://HOST:PORT or tls://HOST:PORT)`},
		{[]string{"--server", srv, "--to", strings.Replace(srv, "unix", "shm", 1), "--all"}, "flexgv migrate: --to " + strings.Replace(srv, "unix", "shm", 1) + " is the server the programs run on"},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--all", "--admin", "admin.sock"}, `flexgv migrate: --admin: admin socket "admin.sock": want unix:///PATH or an absolute PATH`},
		{[]string{"--server", srv, "--to", "unix:///tmp/b.sock", "--all", "extra"}, `flexgv migrate: unexpected argument "extra" (see flexgv migrate --help)`},
	} {
		code, out, errs := runCLI(append([]string{"migrate"}, c.args...)...)
		if code != 2 || out != "" || errs != c.want+"\n" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q, want exit 2 and %q", c.args, code, out, errs, c.want)
		}
	}
}

// A server that is not there: the path tried, and what may be wrong.
func TestMigrateUnreachableServer(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCLI("migrate", "--server", "unix://"+dir+"/a.sock", "--to", "tcp://b:7070", "--tenant", "a")
	want := "flexgv migrate: cannot ask the server of unix://" + dir + "/a.sock through its admin socket " + dir + "/a.sock.admin: dial unix " + dir +
		"/a.sock.admin: connect: no such file or directory (is it running? if it was given --admin, give the same here)\n"
	if code != 1 || out != "" || errs != want {
		t.Errorf("exit %d, stdout %q, stderr %q, want %q", code, out, errs, want)
	}
}

// fakeAdmin answers one request with answer, and hands back the request.
func fakeAdmin(t *testing.T, answer string) (string, chan remote.AdminRequest) {
	path := filepath.Join(t.TempDir(), "admin.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan remote.AdminRequest, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req remote.AdminRequest
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		json.Unmarshal(line, &req)
		got <- req
		c.Write([]byte(answer + "\n"))
	}()
	return path, got
}

// A line per executor; exit status 0 only if every one moved.
func TestMigrateSaysWhatBecameOfEach(t *testing.T) {
	for _, c := range []struct {
		results []remote.MigrateResult
		code    int
		stdout  string
		stderr  string
	}{
		{[]remote.MigrateResult{
			{Pid: 11, Tenant: "a", Peer: "local", Outcome: remote.Moved, Target: "tcp://b:7070", PauseMs: 120},
			{Pid: 12, Tenant: "a", Peer: "10.0.0.2:5000", Outcome: remote.Moved, Target: "tcp://b:7070", PauseMs: 7},
		}, 0, "executor 11 (tenant a, peer local): moved to tcp://b:7070, paused 120 ms\n" +
			"executor 12 (tenant a, peer 10.0.0.2:5000): moved to tcp://b:7070, paused 7 ms\n", ""},
		{[]remote.MigrateResult{
			{Pid: 11, Peer: "local", Outcome: remote.Moved, Target: "tcp://b:7070", PauseMs: 120},
			{Pid: 12, Peer: "local", Outcome: remote.Stayed, Target: "tcp://b:7070", Reason: "the target has no GPU like device 0"},
			{Pid: 13, Peer: "local", Outcome: remote.Pending, Target: "tcp://b:7070", Reason: "the program made no call within 1m30s"},
			{Pid: 14, Peer: "local", Outcome: remote.Ended, Target: "tcp://b:7070", Reason: "the executor ended before moving"},
			{Pid: 15, Peer: "local", Outcome: remote.Refused, Target: "tcp://b:7070", Reason: "its migration to tcp://c:1 asked earlier is still pending"},
		}, 1, "executor 11 (peer local): moved to tcp://b:7070, paused 120 ms\n" +
			"executor 12 (peer local): stayed on unix:///SRV: the target has no GPU like device 0\n" +
			"executor 13 (peer local): no answer within 1m30s: the program made no call; it moves at its next one\n" +
			"executor 14 (peer local): ended before moving\n" +
			"executor 15 (peer local): not asked: its migration to tcp://c:1 asked earlier is still pending\n",
			"flexgv migrate: 1 of 5 executors moved\n"},
	} {
		srv := filepath.Join(t.TempDir(), "a.sock")
		answer, _ := json.Marshal(remote.AdminAnswer{V: 1, Results: c.results})
		path, got := fakeAdmin(t, string(answer))
		code, out, errs := runCLI("migrate", "--server", "unix://"+srv, "--admin", "unix://"+path, "--to", "tcp://b:7070", "--pid", "11", "--wait", "90s")
		if want := strings.ReplaceAll(c.stdout, "/SRV", srv); code != c.code || out != want || errs != c.stderr {
			t.Errorf("exit %d, stdout\n%s, stderr %q; want exit %d, stdout\n%s, stderr %q", code, out, errs, c.code, want, c.stderr)
		}
		if req := <-got; req != (remote.AdminRequest{V: 1, Op: "migrate", To: "tcp://b:7070", Pid: 11, WaitMs: 90000}) {
			t.Errorf("asked %+v", req)
		}
	}
}

// The server's refusal is said as it gave it, exit status 1.
func TestMigrateSaysTheServersError(t *testing.T) {
	srv := filepath.Join(t.TempDir(), "a.sock")
	path, _ := fakeAdmin(t, `{"v":1,"error":"no executor of tenant a runs on this server"}`)
	code, out, errs := runCLI("migrate", "--server", "unix://"+srv, "--admin", path, "--to", "tcp://b:7070", "--tenant", "a")
	if want := "flexgv migrate: the server of unix://" + srv + ": no executor of tenant a runs on this server\n"; code != 1 || out != "" || errs != want {
		t.Errorf("exit %d, stdout %q, stderr %q, want %q", code, out, errs, want)
	}
}

// flexgv serve and flexgv migrate find the same admin socket: a real
// server's, with no executor, answers that none runs.
func TestMigrateReachesServesAdminSocket(t *testing.T) {
	srv, _ := remote.ParseAddr("unix://" + filepath.Join(t.TempDir(), "a.sock"))
	path, err := remote.AdminPath("", srv)
	if err != nil {
		t.Fatal(err)
	}
	l, err := remote.ListenAdmin(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- (&remote.Server{Log: io.Discard}).ServeAdmin(ctx, l) }()
	defer func() { cancel(); <-done }()
	code, out, errs := runCLI("migrate", "--server", srv.String(), "--to", "tcp://b:7070", "--all")
	if want := "flexgv migrate: the server of " + srv.String() + ": no executor runs on this server: no program is connected\n"; code != 1 || out != "" || errs != want {
		t.Errorf("exit %d, stdout %q, stderr %q, want %q", code, out, errs, want)
	}
}

// flexgv serve --admin takes a unix socket's path, nothing else.
func TestServeAdminFlag(t *testing.T) {
	for admin, want := range map[string]string{
		"admin.sock":      `flexgv serve: --admin: admin socket "admin.sock": want unix:///PATH or an absolute PATH`,
		"tcp://h:1":       `flexgv serve: --admin: admin socket "tcp://h:1": want unix:///PATH or an absolute PATH`,
		"unix://x/a.sock": `flexgv serve: --admin: admin socket "unix://x/a.sock": want unix:///PATH or an absolute PATH`,
	} {
		code, out, errs := runCLI("serve", "--listen", "unix:///tmp/a.sock", "--admin", admin)
		if code != 2 || out != "" || errs != want+"\n" {
			t.Errorf("--admin %s: exit %d, stdout %q, stderr %q, want %q", admin, code, out, errs, want)
		}
	}
}
