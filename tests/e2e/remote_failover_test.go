package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// failoverRun runs the mover (6 steps, held before step 4) under flexgv run
// --remote a --failover to, SIGKILLs a's server (its executors die with
// it) once the mover is held, lets it go on and returns how it ended.
func failoverRun(t *testing.T, e *env, a *server, to string, flags ...string) result {
	t.Helper()
	return failoverRunMover(t, e, a, to, nil, flags...)
}

// failoverRunMover is failoverRun with the mover's mode words (more).
func failoverRunMover(t *testing.T, e *env, a *server, to string, more []string, flags ...string) result {
	t.Helper()
	prefix := append([]string{bin("flexgv"), "run", "--remote", a.addr, "--failover", to}, flags...)
	cmd, out, errb, goOn := startHeld(t, e, append(prefix, "--"), append(e.environ(""), "FLEXGV_REMOTE_LOG=errors"), more...)
	a.cmd.Process.Signal(syscall.SIGKILL)
	a.cmd.Wait()
	os.WriteFile(goOn, nil, 0o644)
	endsWithin(t, cmd, 60*time.Second, "its server was killed", errb.String)
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// A checkpoint begun at the syncpoint that gets a queued call's error (a
// launch the driver refused) leaves that error to the program: the
// checkpoint's own calls take none of it. Each step's error is printed as
// locally, with checkpoints every millisecond and the server killed.
func TestRemoteCheckpointsLeaveQueuedErrors(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6", "0", "none", "none", "queuederr"}, "done")
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	p := failoverRunMover(t, e, a, b.addr, []string{"queuederr"}, "--checkpoint-every", "1ms")
	if p.code != 0 || p.stdout != local.stdout || !strings.Contains(p.stderr, "going on at "+b.addr) {
		t.Errorf("its server killed: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
	}
}

// A program whose server is SIGKILLed mid-run goes on at its failover
// server: from the first checkpoint (taken at its first call) with every
// call since made again, or from a checkpoint of its device memory taken
// mid-run, its kernel, graph, stream, event, module variable and mapped
// memory finish with every byte right and the output of a run that was
// never interrupted.
func TestRemoteFailover(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	for _, transport := range []string{"unix", "shm", "tcp", "tls"} {
		for _, every := range []string{"1h", "1ms"} {
			t.Run(transport+"-"+every, func(t *testing.T) {
				var extra []string
				if transport == "tls" { // one certificate for both, which the client trusts
					cert, key := e.cert("server", "127.0.0.1", "localhost")
					extra = []string{"--tls-cert", cert, "--tls-key", key}
					e.extra = append(e.extra, "FLEXGV_REMOTE_CA_FILE="+cert)
				}
				a, b := e.serveNamed("a-"+transport+every, transport, extra...), e.serveNamed("b-"+transport+every, transport, extra...)
				p := failoverRun(t, e, a, b.addr, "--checkpoint-every", every)
				if p.code != 0 || p.stdout != local.stdout {
					t.Errorf("the program: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
				}
				if !strings.Contains(p.stderr, "checkpoint 1 on the failover server "+b.addr+" (in one step") ||
					!strings.Contains(p.stderr, "going on at "+b.addr) {
					t.Errorf("the program did not say it went on at %s:\n%s", b.addr, p.stderr)
				}
				b.quiesce()
			})
		}
	}
}

// A program outlives as many servers as its failover list names: its
// server SIGKILLed at one hold, it goes on at the first failover server,
// which then keeps its checkpoints on the next; that one SIGKILLed at the
// next hold, the program goes on at the last and prints what a run never
// interrupted prints. With a checkpoint at the first call only (1h), the
// second failover is from the checkpoint taken on going on at the first.
func TestRemoteFailoverChain(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	for _, every := range []string{"1h", "1ms"} {
		t.Run(every, func(t *testing.T) {
			a, b, c := e.serveNamed("a"+every, "unix"), e.serveNamed("b"+every, "unix"), e.serveNamed("c"+every, "unix")
			prefix := []string{bin("flexgv"), "run", "--remote", a.addr, "--failover", b.addr + "," + c.addr,
				"--checkpoint-every", every, "--"}
			cmd, out, errb, goOn := startHeldAt(t, e, "2,4", prefix, append(e.environ(""), "FLEXGV_REMOTE_LOG=errors"))
			ready := filepath.Join(e.dir, "ready")
			for i, s := range []*server{a, b} {
				s.cmd.Process.Signal(syscall.SIGKILL)
				s.cmd.Wait()
				os.WriteFile(goOn, nil, 0o644)
				if i == 1 {
					break
				}
				heldAgain(t, goOn, ready, errb)
			}
			endsWithin(t, cmd, 60*time.Second, "its second server was killed", errb.String)
			if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != local.stdout {
				t.Errorf("the program: exit %d\n%s\nwant\n%s\n%s", code, out.String(), local.stdout, errb.String())
			}
			stderr := errb.String()
			// After the last, the first server again: killed, it takes none.
			for _, want := range []string{"going on at " + b.addr + "; checkpoints from here on at " + c.addr,
				"on the failover server " + c.addr + " (in one step", // (after undone attempts in two steps, when the program changed its state under them)
				"going on at " + c.addr + "; checkpoints from here on at " + a.addr + "\n"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("the program did not say %q:\n%s", want, stderr)
				}
			}
			// A checkpoint whose calls found the server lost was for the
			// server the program went on at: not one that failed.
			for _, s := range []*server{b, c} {
				if strings.Contains(stderr, "no checkpoint on the failover server "+s.addr) {
					t.Errorf("a checkpoint was said to fail:\n%s", stderr)
				}
			}
			c.quiesce()
		})
	}
}

// heldFailover is the mover under flexgv run on server a with failover
// server b, checkpoints due at every idle call, held before steps 2 and 4.
type heldFailover struct {
	a, b        *server
	cmd         *exec.Cmd
	out, errb   *lockedBuffer
	goOn, ready string
	said        func(want string) // waits until the program said want
}

// finishAtFailover lets the held mover go on to its next hold, SIGKILLs
// its server there and lets it go on: it must end at its failover server
// with the output of a run never interrupted (local's).
func (h heldFailover) finishAtFailover(t *testing.T, local result) {
	t.Helper()
	os.WriteFile(h.goOn, nil, 0o644)
	heldAgain(t, h.goOn, h.ready, h.errb)
	h.a.cmd.Process.Signal(syscall.SIGKILL)
	h.a.cmd.Wait()
	os.WriteFile(h.goOn, nil, 0o644)
	endsWithin(t, h.cmd, 60*time.Second, "its server was killed", h.errb.String)
	if code := h.cmd.ProcessState.ExitCode(); code != 0 || h.out.String() != local.stdout ||
		!strings.Contains(h.errb.String(), "going on at "+h.b.addr) {
		t.Errorf("the program: exit %d\n%s\nwant\n%s\n%s", code, h.out.String(), local.stdout, h.errb.String())
	}
}

func startHeldFailover(t *testing.T, e *env, mode string) heldFailover {
	t.Helper()
	return startHeldFailoverOn(t, e, e.serveNamed("a", "unix"), e.serveNamed("b", "unix"), mode)
}

func startHeldFailoverOn(t *testing.T, e *env, a, b *server, mode string) heldFailover {
	t.Helper()
	h := heldFailover{a: a, b: b, ready: filepath.Join(e.dir, "ready")}
	prefix := []string{bin("flexgv"), "run", "--remote", h.a.addr, "--failover", h.b.addr, "--checkpoint-every", "1ms", "--"}
	h.cmd, h.out, h.errb, h.goOn = startHeldAt(t, e, "2,4", prefix, append(e.environ(""), "FLEXGV_REMOTE_LOG=errors"), mode)
	h.said = func(want string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(h.errb.String(), want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the program never said %q:\n%s", want, h.errb.String())
			}
		}
	}
	return h
}

// After the last failover server the checkpoints go to the program's first
// server again: restarted after it was killed, it takes them, and the
// program goes on there when its failover server is killed in turn, then
// keeps its checkpoints on that one again. Two servers that come back keep
// a program going however often each dies.
func TestRemoteFailoverRoundToTheFirst(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	// Held while making calls ("busy"): the failovers and checkpoints are
	// made during the holds.
	h := startHeldFailover(t, e, "busy")
	a, b, cmd, out, errb, goOn, ready, said := h.a, h.b, h.cmd, h.out, h.errb, h.goOn, h.ready, h.said
	a.cmd.Process.Signal(syscall.SIGKILL)
	a.cmd.Wait()
	a2 := e.serveNamed("a", "unix")
	said("going on at " + b.addr + "; checkpoints from here on at " + a.addr + "\n")
	said("on the failover server " + a.addr + " (in ")
	os.WriteFile(goOn, nil, 0o644)
	heldAgain(t, goOn, ready, errb)
	b.cmd.Process.Signal(syscall.SIGKILL)
	b.cmd.Wait()
	said("going on at " + a.addr + "; checkpoints from here on at " + b.addr + "\n")
	os.WriteFile(goOn, nil, 0o644)
	endsWithin(t, cmd, 60*time.Second, "its failover server was killed", errb.String)
	if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != local.stdout {
		t.Errorf("the program: exit %d\n%s\nwant\n%s\n%s", code, out.String(), local.stdout, errb.String())
	}
	a2.quiesce()
}

// A program moved (flexgv migrate a to c) has c as its first server from
// then on: c killed, it goes on at its failover server b and keeps its
// checkpoints on c again (should c come back), not on a, which it left.
func TestRemoteFailoverAfterAMove(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	a, b, c := e.serveNamed("a", "unix"), e.serveNamed("b", "unix"), e.serveNamed("c", "unix")
	prefix := []string{bin("flexgv"), "run", "--remote", a.addr, "--failover", b.addr, "--checkpoint-every", "1ms", "--"}
	cmd, out, errb, goOn := startHeld(t, e, prefix, append(e.environ(""), "FLEXGV_REMOTE_LOG=errors"), "busy")
	if m := e.run("flexgv", "migrate", "--server", a.addr, "--to", c.addr, "--all", "--wait", "60s"); m.code != 0 {
		t.Fatalf("flexgv migrate: exit %d\n%s%s\n%s", m.code, m.stdout, m.stderr, errb.String())
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
	os.WriteFile(goOn, nil, 0o644)
	endsWithin(t, cmd, 60*time.Second, "its server was killed", errb.String)
	if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != local.stdout ||
		!strings.Contains(errb.String(), "going on at "+b.addr+"; checkpoints from here on at "+c.addr+"\n") {
		t.Errorf("the program: exit %d\n%s\nwant\n%s\nand checkpoints at %s after going on at %s\n%s", code, out.String(),
			local.stdout, c.addr, b.addr, errb.String())
	}
}

// heldAgain waits until the mover, let go on, took GO (and READY) away
// and holds again at its next hold.
func heldAgain(t *testing.T, goOn, ready string, errb *lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, gone := range []bool{true, false} {
		path := goOn
		if !gone {
			path = ready
		}
		for _, err := os.Stat(path); (err == nil) == gone; _, err = os.Stat(path) {
			if time.Now().After(deadline) {
				t.Fatalf("the mover did not hold again\n%s", errb.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Without a failover server to go on at (nothing listens there), the
// program runs, says it has no checkpoint, and once its server is killed
// gets a CUDA error in bounded time (failoverRun's), not a hang.
func TestRemoteFailoverDown(t *testing.T) {
	e := newEnv(t)
	a := e.serveNamed("a", "unix")
	p := failoverRun(t, e, a, "unix://"+filepath.Join(e.dir, "nobody.sock"), "--checkpoint-every", "1ms")
	if p.code == 0 || !strings.Contains(p.stderr, "no checkpoint on the failover server") ||
		!strings.Contains(p.stderr, "there is no failover server to go on at: cannot connect to unix://") ||
		!strings.Contains(p.stderr, "failed: 46") { // CUDA_ERROR_DEVICE_UNAVAILABLE
		t.Errorf("exit %d\n%s", p.code, p.stderr)
	}
	if n := strings.Count(p.stderr, "no checkpoint on the failover server"); n != 1 {
		t.Errorf("the failing checkpoint was said %d times, want once:\n%s", n, p.stderr)
	}
}

// A replay that cannot be exact fails rather than go on with other data:
// the failover server's tenant has no room for an allocation the program
// made since the checkpoint, so the allocation is answered otherwise there;
// the program gets a CUDA error, and a message naming the call.
func TestRemoteFailoverInexact(t *testing.T) {
	e := newEnv(t)
	tok := e.token("mover")
	a := e.serveNamed("a", "unix", "--tenant", "big:"+tok, "--mem", "1GiB", "--ctx-mem", "64MiB")
	b := e.serveNamed("b", "unix", "--tenant", "small:"+tok, "--mem", "65MiB", "--ctx-mem", "64MiB")
	p := failoverRun(t, e, a, b.addr, "--checkpoint-every", "1h", "--token-file", tok)
	if p.code == 0 || !regexp.MustCompile(`cannot go on exactly at `+regexp.QuoteMeta(b.addr)+`: made again, fgrArenaMap \(call \d+ of \d+ since the checkpoint\) answered otherwise than the program was answered \(there CUDA_ERROR_OUT_OF_MEMORY\)`).MatchString(p.stderr) ||
		!strings.Contains(p.stderr, "failed: 46") {
		t.Errorf("exit %d\n%s", p.code, p.stderr)
	}
}

// spinnerRun runs the spinner (200 µs kernels, for secs seconds) on server
// a with failover server b, a checkpoint every ms milliseconds; once its
// stderr says said, it kills the server of kill (SIGKILL) and returns how
// the spinner ended, its output and its stderr.
func spinnerRun(t *testing.T, e *env, a, b *server, secs, ms, said string, kill *server) (int, string, string) {
	t.Helper()
	errf, err := os.Create(filepath.Join(e.dir, "spinner.err"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin("spinner"), "200", secs)
	cmd.Env = append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE="+a.addr, "FLEXGV_REMOTE_FAILOVER="+b.addr,
		"FLEXGV_REMOTE_CHECKPOINT_MS="+ms, "FLEXGV_REMOTE_LOG=errors")
	cmd.Stderr = errf
	stdin, _ := cmd.StdinPipe()
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	stdin.Write([]byte("\n"))
	stderr := func() string { data, _ := os.ReadFile(errf.Name()); return string(data) }
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr(), said) {
		if time.Now().After(deadline) {
			t.Fatalf("the spinner never said %q:\n%s", said, stderr())
		}
		time.Sleep(time.Millisecond)
	}
	kill.cmd.Process.Signal(syscall.SIGKILL)
	endsWithin(t, cmd, 60*time.Second, "a server was killed", stderr)
	return cmd.ProcessState.ExitCode(), out.String(), stderr()
}

// A checkpoint in two steps (the state's structure made again on the
// failover server while the program runs, its device memory copied at a
// second pause) is one to go on from: a spinner whose server is SIGKILLed
// after one finishes its run at the failover server.
func TestRemoteFailoverTwoSteps(t *testing.T) {
	e := newEnv(t)
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	code, out, stderr := spinnerRun(t, e, a, b, "6", "20", "(in two steps;", a)
	if code != 0 || !strings.Contains(stderr, "going on at "+b.addr) || !strings.Contains(out, "kernels ") {
		t.Errorf("exit %d\n%s\n%s", code, out, stderr)
	}
}

// Checkpoints of a program that changes its state between any two of its
// calls that wait (an event made and destroyed around each, while held):
// the first is tried three times in two steps, undone each time, then taken
// in one, the next tried once; the program goes on from one when its server
// dies.
func TestRemoteFailoverChangingState(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	h := startHeldFailover(t, e, "busy,grow")
	// Held before step 2, with the checkpoints due at every call.
	h.said("(in one step, after 3 in two steps the program's changes undid;")
	// Then one attempt each, as long as none succeeds.
	h.said("(in one step, after 1 in two steps the program's changes undid;")
	h.finishAtFailover(t, local)
}

// The same between hosts (the failover server in a network namespace of its
// own), with a 64 MiB buffer a kernel changes while held: each attempt in
// two steps copies the program's memory ahead, and is undone; the last is
// kept on the failover server where its GPU has room for another copy, and
// the checkpoint in one step copies the memory from there, or else from
// the checkpoint before, device to device, so that only the blocks that
// changed cross between the hosts at the pause.
func TestRemoteFailoverBetweenHostsChangingState(t *testing.T) {
	for _, c := range []struct {
		name, gpu, from string
		full            bool // the target host's second GPU held full by another program
	}{
		{"room", "", "from an attempt there the program's changes undid", false},
		// 1200 MiB: a checkpoint and an attempt (a context of 300 MiB and
		// 68 MiB each) and room for a third (an executor let go that has
		// not yet ended), not for the context and copy a fourth would need.
		{"no room", "FLEXGV_SIM_MEM=1200MiB", "from the checkpoint before on that server", false},
		// Each GPU is asked for room: the program's has plenty, the other
		// none, and the ranges' GPU is not told apart.
		{"another GPU full", "FLEXGV_SIM_DEVICES=2", "from the checkpoint before on that server", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			if c.gpu != "" {
				e.extra = append(e.extra, c.gpu)
			}
			if c.full { // 16 GiB less a context and 100 MiB, on the target host's GPU 1
				env := append(e.environ(filepath.Join(build, "sim")), "FLEXGV_SIM_STATE="+filepath.Join(e.dir, "b-gpu.state"),
					"CUDA_VISIBLE_DEVICES=1")
				e.spawnWith(t, env, "holder", "15984").waitFor(t, "ready")
			}
			local := runsLocally(t, e, []string{"mover", "6", "0", "-", "-", "churn"}, "done")
			h := startHeldFailoverOn(t, e, e.serveNamed("a", "unix"), e.serveApart("b", "unix"), "busy,grow,churn")
			h.said("(in one step, after 1 in two steps the program's changes undid;")
			h.finishAtFailover(t, local)
			one := regexp.MustCompile(`in one step, after \d in two steps the program's changes undid; the program paused \d+ ms; ([\d.]+) MiB of device memory, ([\d.]+) MiB of it device to device, [\d.]+ MiB of state(.*)\)`)
			seeded := 0
			for _, m := range one.FindAllStringSubmatch(h.errb.String(), -1) {
				var all, d2d float64
				fmt.Sscan(m[1], &all)
				fmt.Sscan(m[2], &d2d)
				if !strings.Contains(m[3], "MiB of it "+c.from) {
					continue // the first: nothing before it there
				}
				seeded++
				if all-d2d > 8 {
					t.Errorf("a checkpoint in one step copied %.1f MiB between the hosts at its pause (%s):\n%s", all-d2d, m[0], h.errb.String())
				}
			}
			if seeded == 0 {
				t.Errorf("no checkpoint in one step copied its memory %s:\n%s", c.from, h.errb.String())
			}
		})
	}
}

// The failover settings the program's library reads: a bad one is said and
// CUDA refused (no run without the failover asked for), never a silent
// default.
func TestRemoteFailoverBadSettings(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	sock := strings.TrimPrefix(s.addr, "unix://")
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"FLEXGV_REMOTE_FAILOVER=udp://" + sock}, "FLEXGV_REMOTE_FAILOVER=udp://" + sock + ": want up to 8 of unix:///PATH, shm:///PATH, tcp://HOST:PORT or tls://HOST:PORT, separated by commas"},
		{[]string{"FLEXGV_REMOTE_FAILOVER=" + s.addr + "," + sock}, "want up to 8 of unix:///PATH"},
		{[]string{"FLEXGV_REMOTE_FAILOVER=" + strings.Repeat(s.addr+",", 9)}, "want up to 8 of unix:///PATH"},
		{[]string{"FLEXGV_REMOTE_FAILOVER=,"}, "FLEXGV_REMOTE_FAILOVER=,: no address"},
		{[]string{"FLEXGV_REMOTE_FAILOVER=" + s.addr, "FLEXGV_REMOTE_CHECKPOINT_MS=0"}, "FLEXGV_REMOTE_CHECKPOINT_MS=0: want milliseconds from 1 to 86400000"},
		{[]string{"FLEXGV_REMOTE_FAILOVER=" + s.addr, "FLEXGV_REMOTE_CHECKPOINT_MS=1s"}, "FLEXGV_REMOTE_CHECKPOINT_MS=1s: want milliseconds"},
		{[]string{"FLEXGV_REMOTE_CHECKPOINT_MS=100"}, "FLEXGV_REMOTE_CHECKPOINT_MS is set but FLEXGV_REMOTE_FAILOVER is not"},
	} {
		cmd := exec.Command(bin("rtlike"), "1")
		cmd.Env = append(append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE="+s.addr), c.env...)
		r := runCmd(t, cmd)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, want a refusal saying %q\n%s", c.env, r.code, c.want, r.stderr)
		}
	}
}

// Calls kept while no checkpoint can be taken stop at 1 GiB: past it the
// program says it has no failover from there on, lets the calls go, and
// runs on at its server to the end with every byte right.
func TestRemoteFailoverKeepsBoundedCalls(t *testing.T) {
	e := newEnv(t)
	a := e.serveNamed("a", "unix")
	r := e.run("flexgv", "run", "--remote", a.addr, "--failover", "unix://"+filepath.Join(e.dir, "nobody.sock"), "--checkpoint-every", "1h",
		"--", bin("streamer"), "1280")
	const past = "no failover from here on: the calls kept since the last checkpoint passed 1024 MiB, and no checkpoint could be taken"
	if r.code != 0 || r.stdout != "streamed 1280 MiB ok\n" || strings.Count(r.stderr, past) != 1 {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A failover server killed while checkpoints are made one after the other
// (one under way, most likely) fails that checkpoint, said, and the
// program runs on at its server to the end: losing the failover server
// is not losing its own.
func TestRemoteFailoverServerLostMidCheckpoint(t *testing.T) {
	e := newEnv(t)
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	code, out, stderr := spinnerRun(t, e, a, b, "4", "1", "checkpoint 3 on the failover server", b)
	if code != 0 || !strings.Contains(out, "kernels ") || strings.Contains(stderr, "going on at") ||
		!strings.Contains(stderr, "no checkpoint on the failover server "+b.addr) {
		t.Errorf("exit %d\n%s\n%s", code, out, stderr)
	}
}

// A failover server whose host does not answer (its SYNs dropped: a
// listener whose queue is full) costs the program one short probe, not a
// dial's timeout at each checkpoint: the program runs through, says once
// that it has no checkpoint, and at exit that none was tried past the
// probe, its pauses far below a dial's 15 s.
func TestRemoteFailoverHostSilent(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	silent := fmt.Sprintf("tcp://127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	first, err := net.Dial("tcp", strings.TrimPrefix(silent, "tcp://")) // fills the queue
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	a := e.serveNamed("a", "unix")
	e.extra = append(e.extra, "FLEXGV_REMOTE_LOG=errors")
	p := e.runIn("", "flexgv", "run", "--remote", a.addr, "--failover", silent, "--checkpoint-every", "1ms", "--", bin("mover"), "6")
	if p.code != 0 || p.stdout != local.stdout {
		t.Fatalf("the program: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
	}
	if n := strings.Count(p.stderr, "no checkpoint on the failover server "+silent+": cannot connect to "+silent); n != 1 {
		t.Errorf("the failing checkpoint was said %d times, want once:\n%s", n, p.stderr)
	}
	m := regexp.MustCompile(`0 checkpoints on the failover server \S+, (\d+) not tried \(it did not answer\); the program paused (\d+) ms at most`).FindStringSubmatch(p.stderr)
	if m == nil {
		t.Fatalf("no account of the checkpoints at exit:\n%s", p.stderr)
	}
	if tried, _ := strconv.Atoi(m[1]); tried < 1 {
		t.Errorf("%s checkpoints not tried, want at least the first", m[1])
	}
	if most, _ := strconv.Atoi(m[2]); most >= 10000 {
		t.Errorf("the program paused %d ms at a checkpoint: a dial's timeout", most)
	}
}

// A failover server whose driver runs out of memory at random points (the
// simulated GPU's FLEXGV_SIM_FAIL, in its executors only) while it makes
// checkpoints again and while the program goes on there: a checkpoint it
// cannot make is reported and the one before kept, and the program either
// prints what an uninterrupted run prints or stops with
// CUDA_ERROR_DEVICE_UNAVAILABLE and a message naming the call that went
// otherwise there; never other output, never a hang.
func TestRemoteFailoverServerRunsOut(t *testing.T) {
	long(t)
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	wentOn, stopped := 0, 0
	for seed := 1; seed <= 4; seed++ {
		for _, every := range []string{"1h", "1ms"} {
			a := e.serveNamed(fmt.Sprintf("a%d%s", seed, every), "unix")
			b := e.serveRunningOut(fmt.Sprintf("b%d%s", seed, every), seed)
			p := failoverRun(t, e, a, b.addr, "--checkpoint-every", every)
			// With one checkpoint, at the first call, which calls fail there
			// depends on the seed alone: the counts below.
			once := every == "1h"
			switch {
			case p.code == 0 && p.stdout == local.stdout:
				wentOn += map[bool]int{true: 1}[once]
			case p.code != 0 && strings.Contains(p.stdout, "done"):
				t.Errorf("seed %d, %s: exit %d after printing all\n%s", seed, every, p.code, p.stderr)
			case p.code != 0 && strings.HasPrefix(local.stdout, p.stdout) &&
				strings.Contains(p.stderr, "cannot go on exactly at "+b.addr+": made again, ") &&
				strings.Contains(p.stderr, "(there CUDA_ERROR_OUT_OF_MEMORY); CUDA calls now fail with CUDA_ERROR_DEVICE_UNAVAILABLE") &&
				strings.Contains(p.stderr, "failed: 46"):
				stopped += map[bool]int{true: 1}[once]
			default:
				t.Errorf("seed %d, %s: exit %d, printed\n%s\nwant\n%s\nor a part of it and a stop\n%s", seed, every, p.code, p.stdout, local.stdout, p.stderr)
			}
			if strings.Contains(b.Log(), "ended (signal") {
				t.Errorf("seed %d, %s: an executor ended by a signal:\n%s", seed, every, b.Log())
			}
		}
	}
	if wentOn == 0 || stopped == 0 {
		t.Errorf("from the first checkpoint, went on %d times, stopped %d times: want both among these seeds", wentOn, stopped)
	}
}

// With a failover server, a call that waits holds the connection while the
// server makes it, so that the calls kept are in the order it made them.
// Held from the start, a thread whose stream waited for another thread's
// next answer (its host function waiting for that thread) kept that
// thread's call out until the host function gave up. Such a call now first
// waits without holding the connection: the programs print what they print
// locally, their waits letting the other threads' calls through.
func TestRemoteFailoverWaitsLetOtherThreadsGoOn(t *testing.T) {
	e := newEnv(t)
	handoff := runsLocally(t, e, []string{"hostfunc", "handoff"}, "through the device: yes; the wait answered CUDA_SUCCESS")
	waiters := runsLocally(t, e, []string{"waiters"}, "the shorter ended first: yes")
	for _, transport := range []string{"unix", "shm", "tcp"} {
		a, b := e.serveNamed("a-"+transport, transport), e.serveNamed("b-"+transport, transport)
		for _, tc := range []struct {
			argv  []string
			local result
		}{{[]string{"hostfunc", "handoff"}, handoff}, {[]string{"waiters"}, waiters}} {
			if tc.argv[0] == "waiters" && transport != "unix" {
				continue // 12 s each; the transports differ in how they carry calls, not in how they wait
			}
			r := e.runIn("", "flexgv", append([]string{"run", "--remote", a.addr, "--failover", b.addr, "--checkpoint-every", "1h", "--", bin(tc.argv[0])}, tc.argv[1:]...)...)
			if r.code != 0 || r.stdout != tc.local.stdout {
				t.Errorf("%v over %s with a failover server: exit %d, printed\n%s\nlocally\n%s\n%s", tc.argv, transport, r.code, r.stdout, tc.local.stdout, r.stderr)
			}
		}
	}
	// Its server killed while its threads wait (wherever they are then,
	// waiting without the connection or holding it): the program goes on
	// at the failover server, its output unchanged.
	a, b := e.serveNamed("a-killed", "unix"), e.serveNamed("b-killed", "unix")
	cmd := exec.Command(bin("flexgv"), "run", "--remote", a.addr, "--failover", b.addr, "--", bin("waiters"))
	cmd.Env = append(e.environ(""), "FLEXGV_REMOTE_LOG=errors")
	out, errb := &lockedBuffer{}, &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(errb.String(), "checkpoint 1 on the failover server"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint in 60 s:\n%s", errb.String())
		}
	}
	time.Sleep(2 * time.Second) // into its waits, which take 12 s
	a.cmd.Process.Signal(syscall.SIGKILL)
	a.cmd.Wait()
	endsWithin(t, cmd, 60*time.Second, "its server was killed", errb.String)
	if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != waiters.stdout || !strings.Contains(errb.String(), "going on at "+b.addr) {
		t.Errorf("waiters, its server killed: exit %d, printed\n%s\nlocally\n%s\n%s", code, out.String(), waiters.stdout, errb.String())
	}
}

// With a failover server a call that waits for the device costs one round
// trip, as without one: sent to be made once waited, the executor makes it
// then when no other request came between (a program of one thread, whose
// steps of kernels end in a copy back). The values copied back are the
// kernels', and the run killed mid-way goes on at the failover server with
// the same output.
func TestRemoteFailoverWaitsInOneRoundTrip(t *testing.T) {
	prog := pyContext + `
import sys
mod, fn, p = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuModuleLoadData(ctypes.byref(mod), b"FLEXGV-SIM-MODULE\nkernel fill 200 builtin=fill\n") == 0
assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"fill") == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), 4) == 0
steps, total = int(sys.argv[1]), 0
for s in range(steps):
    if s == steps // 2:
        open(os.environ["HALF"], "w").close()
    for k in range(5):
        v, n = ctypes.c_uint(s * 5 + k), ctypes.c_int(1)
        args = (ctypes.c_void_p * 3)(ctypes.addressof(p), ctypes.addressof(v), ctypes.addressof(n))
        assert cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, args, None) == 0
    got = ctypes.c_uint()
    assert cu.cuMemcpyDtoH_v2(ctypes.byref(got), p, 4) == 0
    total += got.value
print("steps", steps, "sum", total)
`
	e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
	half := filepath.Join(e.dir, "half")
	e.extra = append(e.extra, "HALF="+half)
	const steps = 400
	want := fmt.Sprintf("steps %d sum %d\n", steps, 5*steps*(steps-1)/2+4*steps)
	if r := e.run("python3", "-c", prog, strconv.Itoa(steps)); r.code != 0 || r.stdout != want {
		t.Fatalf("locally: exit %d\n%s\nwant %s%s", r.code, r.stdout, want, r.stderr)
	}
	again := regexp.MustCompile(`(\d+) round trips, \d+ calls queued, \d+ writes, (\d+) calls sent again once waited`)
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	for _, flags := range [][]string{nil, {"--failover", b.addr, "--checkpoint-every", "1h"}} {
		r := e.runIn("", "flexgv", append(append(append([]string{"run", "--remote", a.addr}, flags...), "--", "python3", "-c", prog), strconv.Itoa(steps))...)
		m := again.FindStringSubmatch(r.stderr)
		if r.code != 0 || r.stdout != want || m == nil {
			t.Fatalf("%v: exit %d\n%s\nwant %s%s", flags, r.code, r.stdout, want, r.stderr)
		}
		if trips, _ := strconv.Atoi(m[1]); m[2] != "0" || trips > steps+20 {
			t.Errorf("%v: %s round trips, %s calls sent again once waited, for %d steps that each wait once; want one round trip a step", flags, m[1], m[2], steps)
		}
	}
	// Killed half-way: the calls made at once are made again in their place.
	os.Remove(half)
	cmd := exec.Command(bin("flexgv"), "run", "--remote", a.addr, "--failover", b.addr, "--checkpoint-every", "1h", "--", "python3", "-c", prog, strconv.Itoa(steps))
	cmd.Env = e.environ("")
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); !fileExists(half); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("not half-way in 60 s:\n%s", errb.String())
		}
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	a.cmd.Wait()
	endsWithin(t, cmd, 60*time.Second, "its server was killed", errb.String)
	if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != want || !strings.Contains(errb.String(), "going on at "+b.addr) {
		t.Errorf("killed half-way: exit %d\n%s\nwant %s%s", code, out.String(), want, errb.String())
	}
}

// A queued call's error reaches the thread's next call that waits, with a
// failover server as without one (a launch of more threads than a block
// has: the client answers it queued). The wait-only request sent first
// took the error, and the call after it found none.
func TestRemoteFailoverKeepsQueuedErrors(t *testing.T) {
	prog := pyContext + `
mod, fn, p, got = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint()
assert cu.cuModuleLoadData(ctypes.byref(mod), b"FLEXGV-SIM-MODULE\nkernel k 300\n") == 0
assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"k") == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), 4) == 0
assert cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None) == 0
print("queued", cu.cuLaunchKernel(fn, 1, 1, 1, 4096, 1, 1, 0, None, None, None),
      "copy back", cu.cuMemcpyDtoH_v2(ctypes.byref(got), p, 4), "then", cu.cuCtxSynchronize())
`
	e := newEnv(t)
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	for _, flags := range [][]string{nil, {"--failover", b.addr, "--checkpoint-every", "1h"}} {
		r := e.runIn("", "flexgv", append(append([]string{"run", "--remote", a.addr}, flags...), "--", "python3", "-c", prog)...)
		if r.code != 0 || r.stdout != "queued 0 copy back 1 then 0\n" {
			t.Errorf("%v: exit %d\n%s\nwant queued 0 copy back 1 then 0 (CUDA_ERROR_INVALID_VALUE at the copy)\n%s", flags, r.code, r.stdout, r.stderr)
		}
	}
}

// A program of many device ranges checkpointed again and again: each
// checkpoint moves all its device memory device to device (the old
// executor's handle of a range is given again, never exported anew, so
// no checkpoint finds the executor's handles used up), and the program
// goes on from the last one with every byte right.
func TestRemoteFailoverCheckpointsOfManyRanges(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6", "0", "-", "-", "many"}, "done")
	h := startHeldFailover(t, e, "busy,many")
	// 404 ranges a checkpoint: eight checkpoints export more handles than
	// an executor keeps at once (1024). Those taken before the program
	// made its ranges (at its first calls) hold nothing.
	line := regexp.MustCompile(`checkpoint (\d+) on the failover server [^;]*;[^;]*; ([\d.]+) MiB of device memory, ([\d.]+) MiB of it device to device`)
	held := 0
	for deadline := time.Now().Add(60 * time.Second); held < 8; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints of the program's ranges said:\n%s", held, h.errb.String())
		}
		held = 0
		for _, m := range line.FindAllStringSubmatch(h.errb.String(), -1) {
			if m[2] != "0.0" {
				held++
			}
		}
	}
	for _, m := range line.FindAllStringSubmatch(h.errb.String(), -1) {
		if m[2] != m[3] {
			t.Errorf("checkpoint %s: %s MiB of device memory, %s MiB of it device to device", m[1], m[2], m[3])
		}
	}
	h.finishAtFailover(t, local)
}

// A failover server on another host (a network namespace of its own): a
// checkpoint's device memory is copied ahead while the program runs, by
// the failover server's new executor from the one holding the checkpoint
// before (on that host), and at its second pause only what changed since
// crosses; the program, whose first buffer a kernel keeps changing while
// held, goes on there from one once its server is killed, with every byte
// right.
func TestRemoteFailoverBetweenHosts(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6", "0", "-", "-", "churn"}, "done")
	h := startHeldFailoverOn(t, e, e.serveNamed("a", "unix"), e.serveApart("b", "unix"), "busy,churn")
	h.said("MiB of it from the checkpoint before on that server)")
	h.finishAtFailover(t, local)
	// 67.4 MiB in all; at the pause the churned 1 MiB and what the
	// executors place themselves (module variable, mapped memory).
	for _, m := range regexp.MustCompile(`([\d.]+) MiB of device memory, ([\d.]+) MiB of it device to device, [\d.]+ MiB of state; ([\d.]+) MiB copied before, while the program ran, ([\d.]+) MiB of it from the checkpoint before`).FindAllStringSubmatch(h.errb.String(), -1) {
		var paused float64
		fmt.Sscan(m[1], &paused)
		if paused > 4 || m[2] != "0.0" || m[3] != "67.4" || m[4] != "67.4" {
			t.Errorf("a checkpoint copied %s MiB at its pause (%s device to device), %s ahead (%s from the one before):\n%s",
				m[1], m[2], m[3], m[4], h.errb.String())
		}
	}
}

// A program's host function may wait for the program to go on (CUDA allows
// it), and a capture may stay open across calls: a checkpoint due then
// neither waits for the function (the program paused in the checkpoint
// would never let it go: the drain gives up after 250 ms and the
// checkpoint is taken later) nor drains the device under the capture
// (which would end it): the program prints what it prints locally.
func TestRemoteCheckpointsWaitForNoHostFunction(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"hostfunc", "gated", "1000"}, "the function saw the caller go on: yes")
	for _, transport := range []string{"unix", "tcp"} {
		a, b := e.serveNamed("a-"+transport, transport), e.serveNamed("b-"+transport, transport)
		cmd := exec.Command(bin("flexgv"), "run", "--remote", a.addr, "--failover", b.addr, "--checkpoint-every", "1ms", "--",
			bin("hostfunc"), "gated", "1000")
		cmd.Env = append(e.environ(""), "FLEXGV_REMOTE_LOG=errors")
		var out, errb lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		endsWithin(t, cmd, 60*time.Second, "checkpoints due while a host function waits", errb.String)
		if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != local.stdout {
			t.Errorf("over %s: exit %d, printed\n%s\nlocally\n%s\n%s", transport, code, out.String(), local.stdout, errb.String())
		}
		if !strings.Contains(errb.String(), "no checkpoint on the failover server "+b.addr+": a host function of the program's ran on for 250 ms") {
			t.Errorf("over %s: no checkpoint refused for the host function:\n%s", transport, errb.String())
		}
	}
}
