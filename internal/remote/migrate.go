package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"
)

// A running executor is asked to move its program to another server over
// its control socket (--control-fd): the server writes "migrate ADDR\n"
// and sends SIGUSR2, once the executor said "ready\n" there (it handles the
// signal from then on; before, the signal would end it); the executor
// answers "moved ADDR MILLIS\n" or "stayed REASON\n" once its client has
// tried, which is at the client's next call.

// maxControlLine bounds a line an executor writes on its control socket;
// longer ones are skipped.
const maxControlLine = 1024

// Outcome is what came of asking an executor to move.
type Outcome string

const (
	Moved   Outcome = "moved"   // the program runs on the target now
	Stayed  Outcome = "stayed"  // the program stays here; Reason says why
	Ended   Outcome = "ended"   // the executor ended before moving
	Pending Outcome = "pending" // no answer within the wait; the request stays
	Refused Outcome = "refused" // not asked; Reason says why
)

// MigrateResult is one executor's outcome.
type MigrateResult struct {
	Pid     int     `json:"pid"`
	Tenant  string  `json:"tenant,omitempty"`
	Peer    string  `json:"peer"`
	Outcome Outcome `json:"outcome"`
	Target  string  `json:"target"`
	PauseMs int64   `json:"pause_ms,omitempty"`
	Reason  string  `json:"reason,omitempty"`
}

// Selection picks executors: those of a tenant, the one of a pid, or all.
type Selection struct {
	Tenant string
	Pid    int
	All    bool
}

func (sel Selection) String() string {
	switch {
	case sel.Tenant != "":
		return "the executors of tenant " + sel.Tenant
	case sel.Pid != 0:
		return "executor pid " + strconv.Itoa(sel.Pid)
	}
	return "all executors"
}

func (sel Selection) check() error {
	n := 0
	for _, given := range []bool{sel.Tenant != "", sel.Pid != 0, sel.All} {
		if given {
			n++
		}
	}
	if n != 1 {
		return errors.New("select the executors by one of tenant, pid or all")
	}
	if sel.Pid < 0 {
		return fmt.Errorf("pid %d is not a process id", sel.Pid)
	}
	return nil
}

// executor is what the server keeps of a running executor. pending and
// answer are guarded by the server's mu.
type executor struct {
	pid          int
	tenant, peer string
	proc         *os.Process
	ctl          *os.File // the server's end of the control socket (non-blocking)
	pending      bool     // a migration request awaits its answer
	target       string   // where the pending request asked it to move
	// ready: it said so on its control socket, SIGUSR2 no longer ends it;
	// unsignalled: a request was written before then, to signal once it is.
	ready, unsignalled bool
	// answer is where the answer to the pending request goes (buffered:
	// the Migrate that asked may have stopped waiting).
	answer chan answer
	// ended is closed once the executor ended and its control socket is
	// read to its end.
	ended chan struct{}
}

func (e *executor) who() string {
	if e.tenant != "" {
		return fmt.Sprintf("executor pid %d (tenant %s, peer %s)", e.pid, e.tenant, e.peer)
	}
	return fmt.Sprintf("executor pid %d (peer %s)", e.pid, e.peer)
}

// answer is an executor's answer to a migration request.
type answer struct {
	moved  bool
	addr   string // moved: where the program runs now
	millis int64  // moved: the pause the program saw
	reason string // stayed: why
}

// parseAnswer reads "moved ADDR MILLIS" or "stayed REASON".
func parseAnswer(line string) (answer, error) {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "moved":
		f := strings.Fields(rest)
		if len(f) != 2 {
			return answer{}, fmt.Errorf("answered %q: want moved ADDR MILLIS", line)
		}
		if _, err := ParseAddr(f[0]); err != nil {
			return answer{}, fmt.Errorf("answered %q: %v", line, err)
		}
		ms, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || ms < 0 {
			return answer{}, fmt.Errorf("answered %q: %q is not a pause in milliseconds", line, f[1])
		}
		return answer{moved: true, addr: f[0], millis: ms}, nil
	case "stayed":
		// The reason reaches logs and terminals: no control characters
		// (C1's included, which some terminals take as escapes).
		reason := strings.TrimSpace(strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return ' '
			}
			return r
		}, rest))
		if reason == "" {
			reason = "no reason given"
		}
		return answer{reason: reason}, nil
	}
	return answer{}, fmt.Errorf("answered %q: want moved ADDR MILLIS or stayed REASON", line)
}

// newControl is an executor's control socket: the server's end, made
// non-blocking so that reads end with deadlines, and the executor's.
func newControl() (ours, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socket for the executor: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("control socket for the executor: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control"), nil
}

// readControl reads e's answers until its control socket ends (the
// executor exited: start sets a deadline then, for a socket a child of it
// keeps open), then closes e.ended.
func (s *Server) readControl(e *executor) {
	defer close(e.ended)
	r := bufio.NewReaderSize(e.ctl, maxControlLine)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			if err == nil {
				s.limitedf(&s.controlLog, "%s: a control line longer than %d bytes: ignored", e.who(), maxControlLine)
				continue
			}
		}
		if err != nil {
			return
		}
		if l := strings.TrimSuffix(string(line), "\n"); l == "ready" {
			s.mu.Lock()
			e.ready = true
			due := e.unsignalled
			e.unsignalled = false
			s.mu.Unlock()
			if due {
				e.proc.Signal(syscall.SIGUSR2) // an end meanwhile is found by its answer's wait
			}
		} else {
			s.answered(e, l)
		}
	}
}

// answered takes a line of e's: the answer to its pending request, logged
// whether or not a Migrate still waits for it.
func (s *Server) answered(e *executor, line string) {
	a, err := parseAnswer(line)
	if err != nil {
		s.limitedf(&s.controlLog, "%s: %v: ignored", e.who(), err)
		return
	}
	s.mu.Lock()
	pending, ch := e.pending, e.answer
	e.pending, e.answer = false, nil
	s.mu.Unlock()
	if !pending {
		s.limitedf(&s.controlLog, "%s: answered %q with no migration asked: ignored", e.who(), line)
		return
	}
	if a.moved {
		s.logf("%s: moved to %s, paused %d ms", e.who(), a.addr, a.millis)
	} else {
		s.logf("%s: stayed: %s", e.who(), a.reason)
	}
	if ch != nil {
		ch <- a
	}
}

// Migrate asks the executors sel picks to move their programs to server
// to, all at once, and waits up to wait (or until ctx ends) for each
// answer. An executor that has not answered by then keeps the request: it
// moves at its program's next call, said in the log.
func (s *Server) Migrate(ctx context.Context, to string, sel Selection, wait time.Duration) ([]MigrateResult, error) {
	if _, err := ParseAddr(to); err != nil {
		return nil, fmt.Errorf("target %w", err)
	}
	if err := sel.check(); err != nil {
		return nil, err
	}
	if wait <= 0 {
		return nil, fmt.Errorf("wait %v: want a duration above 0", wait)
	}
	s.mu.Lock()
	var picked []*executor
	for _, e := range s.execs {
		if sel.All || sel.Tenant != "" && e.tenant == sel.Tenant || sel.Pid != 0 && e.pid == sel.Pid {
			picked = append(picked, e)
		}
	}
	results := make([]MigrateResult, len(picked))
	chans := make([]chan answer, len(picked))
	slices.SortFunc(picked, func(a, b *executor) int { return a.pid - b.pid })
	for i, e := range picked {
		results[i] = MigrateResult{Pid: e.pid, Tenant: e.tenant, Peer: e.peer, Target: to}
		if e.pending {
			results[i].Outcome = Refused
			results[i].Reason = fmt.Sprintf("its migration to %s asked earlier is still pending: the program has made no call since", e.target)
			continue
		}
		e.pending, e.target = true, to
		chans[i] = make(chan answer, 1)
		e.answer = chans[i]
	}
	s.mu.Unlock()
	if len(picked) == 0 {
		switch {
		case sel.Tenant != "":
			return nil, fmt.Errorf("no executor of tenant %s runs on this server", sel.Tenant)
		case sel.Pid != 0:
			return nil, fmt.Errorf("no executor with pid %d runs on this server", sel.Pid)
		}
		return nil, errors.New("no executor runs on this server: no program is connected")
	}
	for i, e := range picked {
		if chans[i] == nil {
			continue
		}
		if err := s.ask(e, to); err != nil {
			s.mu.Lock()
			e.pending, e.answer = false, nil
			s.mu.Unlock()
			results[i].Outcome, results[i].Reason = Ended, err.Error()
			chans[i] = nil
		}
	}
	// All wait the same time, from when they were asked.
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for i, e := range picked {
		if chans[i] != nil {
			s.await(ctx, wctx, e, chans[i], wait, &results[i])
		}
	}
	return results, nil
}

// ask writes the request on e's control socket and signals e to read it,
// at once if it said it is ready, else once it does (SIGUSR2 would end an
// executor still starting).
func (s *Server) ask(e *executor, to string) error {
	// The executor may read it late, but one request at most is there.
	e.ctl.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := e.ctl.Write([]byte("migrate " + to + "\n")); err != nil {
		return fmt.Errorf("the executor ended before it was asked (%v)", err)
	}
	s.mu.Lock()
	ready := e.ready
	e.unsignalled = !ready
	s.mu.Unlock()
	if !ready {
		return nil
	}
	if err := e.proc.Signal(syscall.SIGUSR2); err != nil {
		return fmt.Errorf("the executor ended before it was asked (%v)", err)
	}
	return nil
}

// await fills r with e's answer on ch, or its end, or that none came
// before wctx ended (wait passed, or the server's ctx ended).
func (s *Server) await(ctx, wctx context.Context, e *executor, ch chan answer, wait time.Duration, r *MigrateResult) {
	var a answer
	select {
	case a = <-ch:
	case <-e.ended:
		// An answer is read before the end is seen.
		select {
		case a = <-ch:
		default:
			r.Outcome, r.Reason = Ended, "the executor ended before moving"
			return
		}
	case <-wctx.Done():
		// Unless it answered meanwhile, the request stays with the
		// executor; its answer is logged when it comes.
		s.mu.Lock()
		waiting := e.answer == ch
		s.mu.Unlock()
		if waiting {
			r.Outcome, r.Reason = Pending, fmt.Sprintf("the program made no call within %v", wait)
			if ctx.Err() != nil {
				r.Reason = "the server is ending"
			}
			return
		}
		a = <-ch // answered meanwhile
	}
	if a.moved {
		r.Outcome, r.Target, r.PauseMs = Moved, a.addr, a.millis
	} else {
		r.Outcome, r.Reason = Stayed, a.reason
	}
}
