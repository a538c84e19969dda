package e2e

import (
	"strings"
	"testing"
)

// Each way a program reaches the driver is traced call for call.
func TestResolutionPathsAreCountedExactly(t *testing.T) {
	for _, c := range []struct {
		client string
		args   []string
		errors map[string]uint64
	}{
		{"rtlike", []string{"7"}, nil},                                   // cuGetProcAddress_v2, as the CUDA runtime does
		{"direct", []string{"4"}, map[string]uint64{"cuMemAlloc_v2": 1}}, // linked with -lcuda
		{"dlsymclient", nil, nil},                                        // dlsym on the libcuda handle, as PyTorch does
	} {
		t.Run(c.client, func(t *testing.T) {
			e := newEnv(t)
			s, r := e.trace(nil, c.client, c.args...)
			if r.code != 0 || !strings.Contains(r.stdout, c.client+": ok") {
				t.Fatalf("%s failed under the shim (exit %d):\n%s%s", c.client, r.code, r.stdout, r.stderr)
			}
			checkCounts(t, s, expects(t, r.stdout))
			for _, a := range s.APIs {
				if a.Errors != c.errors[a.Name] {
					t.Errorf("%s: %d errors traced, want %d", a.Name, a.Errors, c.errors[a.Name])
				}
			}
			if len(s.Processes) != 1 || s.Processes[0].Status != "exited" {
				t.Errorf("processes: %+v", s.Processes)
			}
		})
	}
}

// Every hooked variant, by dlsym and by cuGetProcAddress with its own
// version and stream flags, lands on the wrapper of exactly its name; the
// same client without the shim lands on the driver's own functions.
func TestEveryVariantReachesItsOwnWrapper(t *testing.T) {
	e := newEnv(t)
	native := e.run("hookmap")
	if native.code != 0 || !strings.Contains(native.stdout, "0 mismatches") {
		t.Fatalf("without the shim:\n%s%s", native.stdout, native.stderr)
	}
	shimmed := e.run("flexgv", "run", "--", bin("hookmap"), "shim")
	if shimmed.code != 0 || !strings.Contains(shimmed.stdout, "0 mismatches") {
		t.Fatalf("under the shim:\n%s%s", shimmed.stdout, shimmed.stderr)
	}
}

// 16 threads launching at once lose no counts.
func TestConcurrentLaunchesLoseNoCounts(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_KERNEL_US=0")
	s, r := e.trace(nil, "threads", "16", "5000")
	if r.code != 0 {
		t.Fatalf("threads failed: %s%s", r.stdout, r.stderr)
	}
	want := expects(t, r.stdout)
	if want["cuLaunchKernel"] != 80000 {
		t.Fatalf("client expectation %d", want["cuLaunchKernel"])
	}
	checkCounts(t, s, want)
}

// Forked, exec'd and SIGKILLed children are all in one summary.
func TestChildrenAreTracedAndAggregated(t *testing.T) {
	e := newEnv(t)
	s, r := e.trace(nil, "forker")
	if r.code != 0 {
		t.Fatalf("forker failed: %s%s", r.stdout, r.stderr)
	}
	checkCounts(t, s, expects(t, r.stdout))
	pids := map[int]bool{}
	status := map[string]int{}
	for _, p := range s.Processes {
		pids[p.Pid] = true
		status[p.Status]++
	}
	// Parent, forked child, exec'd child (two images: before and after the
	// exec) and the killed child.
	if len(pids) != 4 || len(s.Processes) != 5 {
		t.Fatalf("want 4 pids in 5 images, got %+v", s.Processes)
	}
	if status["exited"] != 3 || status["exec"] != 1 || status["gone"] != 1 {
		t.Fatalf("statuses %v, want 3 exited, 1 exec, 1 gone (the SIGKILLed child): %+v", status, s.Processes)
	}
	for _, p := range s.Processes {
		if p.Status == "gone" && p.Calls != 7 {
			t.Errorf("the killed child's 7 calls are missing: %+v", p)
		}
	}
}
