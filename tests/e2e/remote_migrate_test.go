package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// moverRun starts the mover (6 steps, held before step 3) on server from,
// asks flexgv migrate to move it to server to once it is held, lets it go
// on and returns what the command printed (with its exit status) and the
// program's output.
func moverRun(t *testing.T, e *env, from, to *server, env ...string) (migrate result, prog result) {
	t.Helper()
	ready, goOn := filepath.Join(e.dir, "ready"), filepath.Join(e.dir, "go")
	os.Remove(ready)
	os.Remove(goOn)
	cmd := exec.Command(bin("mover"), "6", "3", ready, goOn)
	cmd.Env = append(append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE="+from.addr), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mover never reached its hold\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan result)
	go func() {
		done <- e.run("flexgv", "migrate", "--server", from.addr, "--to", to.addr, "--all", "--wait", "60s")
	}()
	// The request reaches the executor before the program goes on, so that
	// it moves at once (either order works: it moves at a call after).
	from.waitLog(`asks to move `, 10*time.Second)
	os.WriteFile(goOn, nil, 0o644)
	migrate = <-done
	err := cmd.Wait()
	prog = result{out.String(), errb.String(), 0}
	if ee, ok := err.(*exec.ExitError); ok {
		prog.code = ee.ExitCode()
	}
	return migrate, prog
}

// A running program moved to another server mid-run: its kernel, graph,
// stream, event and device memory (more than one piece of a move) go on
// there with every byte right, its output that of a run that never moved;
// the old executor ends, the new one serves the rest.
func TestRemoteMigrate(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	for _, transport := range []string{"unix", "tcp", "tls"} {
		t.Run(transport, func(t *testing.T) {
			var extra []string
			if transport == "tls" { // one certificate for both, which the client trusts
				cert, key := e.cert("server", "127.0.0.1", "localhost")
				extra = []string{"--tls-cert", cert, "--tls-key", key}
				e.extra = append(e.extra, "FLEXGV_REMOTE_CA_FILE="+cert)
			}
			a, b := e.serveNamed("a-"+transport, transport, extra...), e.serveNamed("b-"+transport, transport, extra...)
			m, p := moverRun(t, e, a, b)
			if m.code != 0 || !strings.Contains(m.stdout, "moved to "+b.addr) {
				t.Errorf("flexgv migrate: exit %d\n%s%s", m.code, m.stdout, m.stderr)
			}
			if p.code != 0 || p.stdout != local.stdout {
				t.Errorf("the moved program: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
			}
			if !strings.Contains(p.stderr, "moved to the GPU server "+b.addr) {
				t.Errorf("the program was not told it moved:\n%s", p.stderr)
			}
			// Both servers on this host: the allocations went device to
			// device (the module variable and mapped memory through here).
			if !regexp.MustCompile(`\(the program paused \d+ ms; 2\.0 MiB of device memory copied, 2\.0 MiB of it device to device`).MatchString(p.stderr) {
				t.Errorf("the device memory did not move device to device:\n%s", p.stderr)
			}
			a.waitLog(`the program moved to another server`, 10*time.Second)
			a.quiesce()
			b.waitLog(`connected: executor pid`, 10*time.Second)
			b.quiesce()
		})
	}
}

// A move the target cannot take (the program's memory over its tenant's
// quota there) leaves the program where it was: it finishes
// there with the same output, and both flexgv migrate and the program say
// why.
func TestRemoteMigrateRefused(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	// One token, a tenant on each server; on the target one MiB of room
	// beside its context, less than the program's two.
	tok := e.token("mover")
	a := e.serveNamed("a", "unix", "--tenant", "big:"+tok, "--mem", "1GiB", "--ctx-mem", "64MiB")
	b := e.serveNamed("b", "unix", "--tenant", "small:"+tok, "--mem", "65MiB", "--ctx-mem", "64MiB")
	m, p := moverRun(t, e, a, b, "FLEXGV_REMOTE_TOKEN_FILE="+tok)
	const why = "CUDA_ERROR_OUT_OF_MEMORY"
	if m.code == 0 || !strings.Contains(m.stdout, "stayed on") || !strings.Contains(m.stdout, why) {
		t.Errorf("flexgv migrate: exit %d, want a refusal naming %s\n%s%s", m.code, why, m.stdout, m.stderr)
	}
	if p.code != 0 || p.stdout != local.stdout {
		t.Errorf("the program that stayed: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
	}
	if !strings.Contains(p.stderr, "stays on this GPU server: ") || !strings.Contains(p.stderr, why) {
		t.Errorf("the program did not say why it stays:\n%s", p.stderr)
	}
	b.quiesce() // the target's executor ended with the move
}
