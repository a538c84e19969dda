package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// writesOf is the number of writes FLEXGV_REMOTE_LOG=calls said a run made.
func writesOf(t *testing.T, r result) int {
	t.Helper()
	m := regexp.MustCompile(`round trips, \d+ calls queued, (\d+) writes`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no count of writes: exit %d\n%s", r.code, r.stderr)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Over a socket, queued calls are gathered and written together; with
// FLEXGV_REMOTE_BATCH_US=0 each is written as it comes.
func TestRemoteQueuedCallsGathered(t *testing.T) {
	const launches = 2000
	for _, transport := range []string{"unix", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			for _, c := range []struct {
				env      string
				min, max int
			}{
				{"", 1, launches / 10},
				{"FLEXGV_REMOTE_BATCH_US=0", launches, 2 * launches},
			} {
				e := newEnv(t, "FLEXGV_SIM_KERNEL_US=0", "FLEXGV_REMOTE_LOG=calls", c.env)
				s := e.serve(transport)
				r := e.remote(s, "launchloop", strconv.Itoa(launches))
				w := writesOf(t, r)
				t.Logf("%q: %d launches in %d writes", c.env, launches, w)
				if r.code != 0 || w < c.min || w > c.max {
					t.Errorf("%s %d launches: exit %d, %d writes, want %d to %d\n%s", c.env, launches, r.code, w, c.min, c.max, r.stderr)
				}
			}
		})
	}
}

// Calls gathered reach the GPU by themselves: a program that launches a
// kernel (100 ms on the simulated GPU) and then waits a second without a
// CUDA call finds it done, even when calls may wait 100 ms to be gathered.
func TestRemoteGatheredCallsGoWhileTheProgramWaits(t *testing.T) {
	for _, env := range []string{"", "FLEXGV_REMOTE_BATCH_US=100000"} {
		e := newEnv(t, "FLEXGV_SIM_KERNEL_US=100000", env)
		s := e.serve("tcp")
		if r := e.remote(s, "launchloop", "idle", "1000"); r.code != 0 || r.stdout != "ran while the program waited: yes\n" {
			t.Errorf("%s: exit %d, printed %q\n%s", env, r.code, r.stdout, r.stderr)
		}
	}
}

func TestRemoteBatchSettingRefused(t *testing.T) {
	e := newEnv(t, "FLEXGV_REMOTE_BATCH_US=soon")
	s := e.serve("unix")
	r := e.remote(s, "launchloop", "1")
	if r.code == 0 || !strings.Contains(r.stderr, "FLEXGV_REMOTE_BATCH_US=soon: want microseconds from 0 to 100000") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
}
