package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// The CUDA 13 driver's private tables, emulated by the remoting client:
// cudartclient uses them as the runtime and the libraries do (every check
// of its own passes) over a unix socket and over shared memory, with two
// devices in the integrity check; the one word it calls that is not
// emulated is refused and said once.
func TestRemoteCudartTables(t *testing.T) {
	for _, transport := range []string{"unix", "shm"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t, "FLEXGV_SIM_DEVICES=2")
			s := e.serve(transport)
			r := e.remote(s, "cudartclient")
			if r.code != 0 {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, want := range []string{"table cls: 0 bytes\n", "table ctx: 744 bytes\n",
				"cls: 6 threads, destructors at destroy and reset\n", "integrity: as recomputed over 2 devices\n",
				"tools module: add and fill\n"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("output lacks %q:\n%s", want, r.stdout)
				}
			}
			said := "export table t69a2 69a28e9f-2449-8b47-b030-c5da330ea4e9: word 19 is not emulated"
			if n := strings.Count(r.stderr, said); n != 1 {
				t.Errorf("the word not emulated was said %d times:\n%s", n, r.stderr)
			}
		})
	}
}

// flexgv census counts calls through the client's tables as it counts the
// driver's: the word not emulated shows its two calls.
func TestRemoteCudartTablesCensus(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	e.extra = append(e.extra, "FLEXGV_REMOTE="+s.addr)
	rep, r := e.census([]string{"--driver", filepath.Join(build, "remote", "libcuda.so.1")}, bin("cudartclient"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	calls := map[string]uint64{}
	for _, tb := range rep.Tables {
		for _, sl := range tb.Slots {
			calls[fmt.Sprintf("%s/%d", tb.UUID, sl.Index)] = sl.Calls
		}
	}
	for slot, want := range map[string]uint64{
		"69a28e9f-2449-8b47-b030-c5da330ea4e9/19": 2, // not emulated
		"6bd5fb6c-5bf4-e74a-8987-d93912fd9df9/2":  2, // the primary context
		"c693336e-1121-df11-a8c3-68f355d89593/1":  1, // one delete
	} {
		if calls[slot] != want {
			t.Errorf("%s: %d calls, want %d", slot, calls[slot], want)
		}
	}
}
