package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/flexgv/flexgv/internal/tenant"
)

// The lifecycle of tenant files: who may create, join and see them, and
// that nothing is left behind however their runs end.

func (e *env) stateDir() string { return filepath.Join(e.dir, "tenants") }

// leftovers lists the tenant files in a state folder, and files being
// written aside.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), "tenant-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// Files in the state folder that are not tenants (anyone can put files
// there) are reported and skipped; the tenants are still listed.
func TestTenantDamagedFilesAreSkipped(t *testing.T) {
	e := quotaEnv(t)
	stop := e.start(t, "flexgv", "run", "--group", "good", "--mem", "1GiB", "--", "sh", "-c", "echo ready; read x")
	defer stop()
	good, err := os.ReadFile(filepath.Join(e.stateDir(), "tenant-good"))
	if err != nil {
		t.Fatal(err)
	}
	broken := append([]byte(nil), good...)
	h := (*tenant.Header)(unsafe.Pointer(&broken[0]))
	h.Name = [64]byte{}
	copy(h.Name[:], "broken")
	h.NSlots = 1 << 31
	noise := make([]byte, len(good))
	rand.New(rand.NewSource(1)).Read(noise)
	for name, data := range map[string][]byte{"short": good[:100], "broken": broken, "noise": noise} {
		if err := os.WriteFile(filepath.Join(e.stateDir(), "tenant-"+name), data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	r := e.run("flexgv", "ps")
	warnings := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 0 || !regexp.MustCompile(`(?m)^good\s+0 GPU-[0-9a-f]{8}\s+1GiB\s`).MatchString(r.stdout) || len(warnings) != 3 {
		t.Fatalf("flexgv ps: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for i, msg := range []string{"tenant-broken: damaged", "tenant-noise: not a tenant file", "tenant-short: truncated"} {
		if !strings.HasPrefix(warnings[i], "flexgv ps: warning: skipped ") || !strings.Contains(warnings[i], msg) {
			t.Errorf("warning %q, want one about %s", warnings[i], msg)
		}
	}
	r = e.run("flexgv", "ps", "--json")
	var infos []tenant.Info
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || r.code != 0 || len(infos) != 1 || infos[0].Name != "good" ||
		!regexp.MustCompile(`^GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$`).MatchString(infos[0].Devices[0].UUID) {
		t.Fatalf("flexgv ps --json: %v %+v", err, r)
	}
	// They may be another flexgv version's: left where they are.
	if got := leftovers(t, e.stateDir()); len(got) != 4 {
		t.Errorf("state folder after ps: %v", got)
	}
}

// The state folder is shared by every user (01777) and tenant files are
// 0640, whatever the umask of the run that created them.
func TestTenantFileModesIgnoreTheUmask(t *testing.T) {
	for _, umask := range []string{"000", "077"} {
		e := quotaEnv(t)
		r := e.run("sh", "-c", "umask "+umask+`; exec "$0" "$@"`, bin("flexgv"), "run", "--group", "g", "--mem", "1GiB", "--",
			"sh", "-c", `stat -c %a "$FLEXGV_TENANT"`)
		if r.code != 0 || r.stdout != "640\n" {
			t.Errorf("umask %s: tenant file mode %q (exit %d, %s), want 640", umask, r.stdout, r.code, r.stderr)
		}
		for p, want := range map[string]os.FileMode{e.stateDir(): os.ModeDir | os.ModeSticky | 0o777, filepath.Join(e.stateDir(), ".lock"): 0o666} {
			if st, err := os.Stat(p); err != nil || st.Mode() != want {
				t.Errorf("umask %s: %s is %v (%v), want %v", umask, p, st.Mode(), err, want)
			}
		}
	}
}

// user runs a program as root, or as the user cred names, with the state
// folder state.
type user struct {
	cli, state string
	cred       *syscall.Credential
}

var nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

func (u user) cmd(e *env, args ...string) *exec.Cmd {
	cmd := exec.Command(u.cli, args...)
	cmd.Env = append(e.environ(""), "FLEXGV_STATE_DIR="+u.state)
	cmd.Dir = filepath.Dir(u.state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
	return cmd
}

func (u user) run(t *testing.T, e *env, args ...string) result {
	t.Helper()
	return runCmd(t, u.cmd(e, args...))
}

// hold starts a member of the group that stays until the test ends.
func (u user) hold(t *testing.T, e *env, args ...string) {
	t.Helper()
	cmd := u.cmd(e, append(args, "--", "sh", "-c", "echo ready; read x")...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	var line [6]byte
	if _, err := io.ReadFull(stdout, line[:]); err != nil || string(line[:]) != "ready\n" {
		t.Fatalf("%v: %q %v", cmd.Args, line, err)
	}
}

// A second user creates groups in the folder root made (under umask 077),
// and may not join root's; root may join theirs.
func TestTenantOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run flexgv as another user")
	}
	// Everything the other user runs must be reachable by them.
	base, err := os.MkdirTemp("", "flexgv-users-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	for src, dst := range map[string]string{bin("flexgv"): "bin/flexgv", filepath.Join(build, "lib", "libflexgv.so"): "lib/libflexgv.so"} {
		data, err := os.ReadFile(src)
		if err == nil {
			err = os.MkdirAll(filepath.Join(base, filepath.Dir(dst)), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(base, dst), data, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	e := quotaEnv(t)
	root := user{cli: filepath.Join(base, "bin", "flexgv"), state: filepath.Join(base, "tenants")}
	other := root
	other.cred = nobody

	umask077 := user{cli: "sh", state: root.state}
	umask077.hold(t, e, "-c", `umask 077; exec "$0" "$@"`, root.cli, "run", "--group", "rootg", "--mem", "1GiB")
	r := other.run(t, e, "run", "--group", "mine", "--mem", "1GiB", "--", "sh", "-c", `test -r "$FLEXGV_TENANT" && echo ok`)
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("another user's own group: %+v", r)
	}
	for _, args := range [][]string{{"--group", "rootg"}, {"--group", "rootg", "--mem", "1GiB"}} {
		r = other.run(t, e, append(append([]string{"run"}, args...), "--", "sh", "-c", "echo started")...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "group rootg belongs to user root (uid 0); choose another name") {
			t.Errorf("another user joining root's group (%v): %+v", args, r)
		}
	}
	other.hold(t, e, "run", "--group", "mine", "--mem", "1GiB")
	r = root.run(t, e, "run", "--group", "mine", "--", "sh", "-c", `test -r "$FLEXGV_TENANT" && echo ok`)
	if r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("root joining another user's group: %+v", r)
	}
	st, err := os.Stat(filepath.Join(root.state, "tenant-mine"))
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != nobody.Uid {
		t.Errorf("the other user's tenant file: %v %v", st, err)
	}
}

// Runs join while the run that created the group exits: every program
// finds its tenant file, and the last run out removes it. The joiners
// give --mem too, so that one that comes after the group emptied creates
// it again instead of failing.
func TestTenantSixtyJoinsWhileTheCreatorExits(t *testing.T) {
	e := quotaEnv(t)
	creator := e.startProc(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--", "sh", "-c", "echo ready; read x")
	results := make([]result, 60)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.run("flexgv", "run", "--group", "g", "--mem", "1GiB", "--", "sh", "-c", `test -r "$FLEXGV_TENANT" && echo ok`)
		}()
	}
	creator.stdin.Close()
	creator.cmd.Wait()
	wg.Wait()
	for i, r := range results {
		if r.code != 0 || r.stdout != "ok\n" {
			t.Errorf("run %d: %+v", i, r)
		}
	}
	if left := leftovers(t, e.stateDir()); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// A run killed with SIGKILL (its program too) cannot remove its tenant;
// the next flexgv ps does.
func TestTenantOfAKilledRunIsRemoved(t *testing.T) {
	e := quotaEnv(t)
	cmd := exec.Command(bin("flexgv"), "run", "--group", "g", "--mem", "1GiB", "--", "sleep", "30")
	cmd.Env = e.environ(filepath.Join(build, "sim"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	// Any of the CLI's threads may have started the program.
	children := fmt.Sprintf("/proc/%d/task/*/children", cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); !hasChildren(children); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("flexgv run never started its program")
		}
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	if left := leftovers(t, e.stateDir()); len(left) != 1 {
		t.Fatalf("after SIGKILL: %v, want the tenant file still there", left)
	}
	r := e.run("flexgv", "ps")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
		t.Errorf("flexgv ps after the kill: %+v, want only the heading", r)
	}
	if left := leftovers(t, e.stateDir()); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func hasChildren(pattern string) bool {
	files, _ := filepath.Glob(pattern)
	for _, f := range files {
		if data, _ := os.ReadFile(f); len(strings.TrimSpace(string(data))) > 0 {
			return true
		}
	}
	return false
}
