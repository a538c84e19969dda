package e2e

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Programs that never touch CUDA behave exactly as without the shim.
func TestNonCUDAProgramsAreUntouched(t *testing.T) {
	e := newEnv(t)
	for _, argv := range [][]string{
		{bin("nocuda")},
		{"sh", "-c", "echo out; echo err >&2; ls / >/dev/null; exit 3"},
		{"python3", "-c", "import ctypes, os, sys; print(os.getpid() > 0, ctypes.CDLL(None).getpid() > 0); sys.exit(5)"},
	} {
		native := e.runIn("", argv[0], argv[1:]...)
		for _, mode := range []string{"run", "trace"} {
			args := []string{mode}
			if mode == "trace" {
				args = append(args, "-o", filepath.Join(e.dir, "s.txt"))
			}
			shimmed := e.runIn("", "flexgv", append(append(args, "--"), argv...)...)
			// Without a driver on the path flexgv warns once; nothing else may differ.
			stderr := strings.Join(dropWarning(shimmed.stderr), "\n")
			if shimmed.stdout != native.stdout || stderr != strings.TrimRight(native.stderr, "\n") || shimmed.code != native.code {
				t.Errorf("%s under flexgv %s differs:\nnative %+v\nshim   %+v", argv[0], mode, native, shimmed)
			}
		}
	}
}

func dropWarning(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
		if !strings.HasPrefix(l, "flexgv: warning: no CUDA driver") && l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Another interposer preloaded after the shim keeps RTLD_NEXT semantics.
func TestSecondInterposerKeepsRTLDNext(t *testing.T) {
	e := newEnv(t, "LD_PRELOAD="+bin("libnextlib.so"))
	r := e.run("flexgv", "run", "--", bin("nextlib_user"))
	if r.code != 0 || r.stdout != "nextlib: ok\n" {
		t.Fatalf("nextlib_user under the shim: %+v", r)
	}
}

// No driver: the program sees what it sees without flexgv, and flexgv says
// what is missing.
func TestMissingDriver(t *testing.T) {
	e := newEnv(t)
	empty := t.TempDir()
	native := e.runIn(empty, "rtlike")
	shimmed := e.runIn(empty, "flexgv", "run", "--", bin("rtlike"))
	if native.code != 35 || shimmed.code != native.code || shimmed.stdout != native.stdout {
		t.Fatalf("native %+v\nshim %+v", native, shimmed)
	}
	if !strings.Contains(shimmed.stderr, "flexgv: warning: no CUDA driver (libcuda.so.1)") ||
		!strings.Contains(shimmed.stderr, "rtlike: no CUDA driver") {
		t.Fatalf("stderr under the shim: %q", shimmed.stderr)
	}
	// A driver path that does not load: the shim says so once, and every
	// call fails cleanly instead of crashing.
	e2 := newEnv(t, "FLEXGV_DRIVER=/nonexistent/libcuda.so.1")
	r := e2.run("flexgv", "run", "--", bin("direct"))
	if r.code != 1 || strings.Count(r.stderr, "flexgv: cannot load /nonexistent/libcuda.so.1") != 1 ||
		!strings.Contains(r.stderr, "cuInit(0) failed: 3") {
		t.Fatalf("direct with a bad FLEXGV_DRIVER: %+v", r)
	}
}

// The simulated GPU refuses a bad configuration with a clear message.
func TestBadSimulatorConfig(t *testing.T) {
	for _, c := range []struct{ env, msg string }{
		{"FLEXGV_SIM_CONFIG=/nonexistent/sim.conf", "cannot read FLEXGV_SIM_CONFIG=/nonexistent/sim.conf"},
		{"FLEXGV_SIM_MEM=lots", "invalid FLEXGV_SIM_MEM=lots"},
		{"FLEXGV_SIM_DEVICES=99", "invalid FLEXGV_SIM_DEVICES=99"},
	} {
		e := newEnv(t, c.env)
		r := e.run("direct")
		if r.code == 0 || !strings.Contains(r.stderr, c.msg) || !strings.Contains(r.stderr, "cuInit(0) failed: 3") {
			t.Errorf("%s: %+v", c.env, r)
		}
	}
}

// The shim loads in old container images: no glibc symbol newer than 2.17.
func TestShimGlibcFloor(t *testing.T) {
	f, err := elf.Open(filepath.Join(build, "lib", "libflexgv.so"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		v, ok := strings.CutPrefix(s.Version, "GLIBC_")
		if !ok {
			continue
		}
		parts := strings.Split(v, ".")
		minor, _ := strconv.Atoi(parts[1])
		if parts[0] != "2" || minor > 17 {
			t.Errorf("%s needs %s", s.Name, s.Version)
		}
	}
}

// Whatever allocating call the driver refuses for want of memory (the
// simulated GPU's FLEXGV_SIM_FAIL, at random points), no program of the
// suite ends by a signal, under the shim or remotely, and no executor
// does: each refusal is an error the program is given.
func TestNoProgramCrashesWhenTheDriverRunsOut(t *testing.T) {
	long(t)
	progs := [][]string{{"arrays"}, {"blaslike"}, {"captureclient"}, {"copy3d"}, {"cudartclient"}, {"direct"},
		{"dlsymclient"}, {"families"}, {"graphnodes"}, {"graphnodes", "generic"}, {"graphnodes", "pageable"},
		{"graphnodes", "conditional"}, {"hostfunc"}, {"linker"}, {"managed"}, {"mapped"}, {"memclient", "paths"},
		{"memclient", "segments"}, {"memset2d"}, {"rtlike", "2"}, {"streamer"}, {"threads"}, {"exportclient"}, {"optclient"}}
	for _, seed := range []string{"1", "2"} {
		e := quotaEnv(t, "FLEXGV_SIM_FAIL=30:"+seed, "FLEXGV_SIM_DEVICES=2")
		s := e.serve("unix")
		for _, p := range progs {
			for where, r := range map[string]result{
				"under the shim": e.run("flexgv", append([]string{"run", "--mem", "4GiB", "--", bin(p[0])}, p[1:]...)...),
				"remotely":       e.remote(s, p[0], p[1:]...),
			} {
				if r.code > 128 {
					t.Errorf("seed %s: %v %s ended by signal %d\n%s", seed, p, where, r.code-128, r.stderr)
				}
			}
		}
		if log := s.Log(); strings.Contains(log, "ended (signal") {
			t.Errorf("seed %s: an executor ended by a signal:\n%s", seed, log)
		}
	}
}

// Every entry point called with all-zero arguments (NULL pointers, handle
// 0, sizes and flags 0), as a careless or hostile program may, returns:
// on the simulated GPU, under the shim's quota, share and trace paths, and
// remotely over each transport (the client's checks, then the executor's).
// The names are the remoting client's (docs/REMOTE-SUPPORT.md, made from
// the spec): every function of CUDA 13's headers at each version it has.
func TestNoEntryPointCrashesOnZeroArguments(t *testing.T) {
	e := newEnv(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "REMOTE-SUPPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	var names strings.Builder
	for _, m := range regexp.MustCompile("(?m)^\\| `(cu\\w+)`").FindAllStringSubmatch(string(doc), -1) {
		names.WriteString("0 " + m[1] + "\n")
	}
	list := filepath.Join(e.dir, "names")
	if err := os.WriteFile(list, []byte(names.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	unix, tcp := e.serve("unix"), e.serve("tcp")
	for _, tc := range []struct {
		how  string
		argv []string
		min  int // the names the simulated GPU or the client exports
	}{
		{"on the simulated GPU", []string{bin("zeroes")}, 400},
		{"under --mem and --compute", []string{"flexgv", "run", "--mem", "4GiB", "--compute", "50%", "--", bin("zeroes")}, 400},
		{"under flexgv trace", []string{"flexgv", "trace", "-o", filepath.Join(e.dir, "trace.txt"), "--", bin("zeroes")}, 400},
		{"over unix://", []string{"flexgv", "run", "--remote", unix.addr, "--", bin("zeroes")}, 550},
		{"over shm://", []string{"flexgv", "run", "--remote", strings.Replace(unix.addr, "unix://", "shm://", 1), "--", bin("zeroes")}, 550},
		{"over tcp://", []string{"flexgv", "run", "--remote", tcp.addr, "--", bin("zeroes")}, 550},
	} {
		lib := filepath.Join(build, "sim")
		if tc.argv[0] == "flexgv" && tc.argv[2] == "--remote" {
			lib = ""
		}
		r := e.runIn(lib, tc.argv[0], append(tc.argv[1:], list)...)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		called := 0
		fmt.Sscanf(lines[len(lines)-1], "called %d", &called)
		if r.code != 0 || called < tc.min {
			t.Errorf("%s: exit %d, %d called (want %d or more); the last call: %q\n%s", tc.how, r.code, called, tc.min,
				lines[len(lines)-1], r.stderr)
		}
	}
}

// An anonymous private mapping asked populated, as the driver's checkpoint
// makes its host copy, is resident, zeroed and writable under the shim as
// without it, and lies on huge pages where the kernel gives them on advice
// (its populate was most of a 10 GiB checkpoint on an H100); the shim's
// threads populate it behind the caller, and never what is mapped there
// once it is unmapped, in the process or a forked child; a mapping not
// asked populated is left as it is.
func TestHostCopiesOnHugePages(t *testing.T) {
	e := newEnv(t)
	native := e.run("hostcopy", "512")
	shimmed := e.run("flexgv", "run", "--", bin("hostcopy"), "512")
	thp, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	huge := "some"
	if !strings.Contains(string(thp), "[always]") && !strings.Contains(string(thp), "[madvise]") {
		huge = "none" // the kernel gives none
	}
	// A thread for each CPU, eight at most.
	threads := min(runtime.NumCPU(), 8)
	want := fmt.Sprintf("asked populated: resident all, zeroed yes, writable yes, huge pages %s, threads started %d\n", huge, threads)
	if native.code != 0 || !strings.HasPrefix(native.stdout, "asked populated: resident all, zeroed yes, writable yes, ") ||
		!strings.Contains(native.stdout, "threads started 0\n") {
		t.Fatalf("natively: %+v", native)
	}
	if shimmed.code != 0 || !strings.HasPrefix(shimmed.stdout, want) {
		t.Errorf("under the shim (huge pages %s): %+v, want %q first", strings.TrimSpace(string(thp)), shimmed, want)
	}
	for _, tc := range []struct{ mode, want string }{
		{"unmapped", "the mapping made where it was: resident none\n"},
		{"forked", "the child's munmap returned: yes\n"},
	} {
		if r := e.run("flexgv", "run", "--", bin("hostcopy"), tc.mode, "1024"); r.code != 0 || r.stdout != tc.want {
			t.Errorf("hostcopy %s: %+v, want %q", tc.mode, r, tc.want)
		}
	}
	notAsked := strings.SplitAfter(native.stdout, "\n")[1]
	if !strings.HasSuffix(shimmed.stdout, notAsked) || !strings.HasPrefix(notAsked, "not asked: resident none, zeroed yes, writable yes") {
		t.Errorf("a mapping not asked populated: natively %q, under the shim %q", native.stdout, shimmed.stdout)
	}
}
