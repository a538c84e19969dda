package e2e

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refuse checks that CLI ARGS -- sh -c 'echo started' stops before the
// program with the exit code and a message.
func (e *env) refuse(code int, msg, cli string, args ...string) {
	e.t.Helper()
	args = append(args, "--", "sh", "-c", "echo started")
	r := e.run(cli, args...)
	if r.code != code || r.stdout != "" || !strings.Contains(r.stderr, msg) {
		e.t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want exit %d before the program and %q",
			cli, strings.Join(args, " "), r.code, r.stdout, r.stderr, code, msg)
	}
}

func TestRefusalsOfFlagValues(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_MEM=16GiB")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "--mem", ""}, "--mem is empty"},
		{[]string{"run", "--group", ""}, "--group is empty"},
		{[]string{"run", "--group", "", "--mem", "1GiB"}, "--group is empty"},
		{[]string{"run", "--shim", ""}, "flexgv run: --shim is empty"},
		{[]string{"trace", "--driver", ""}, "flexgv trace: --driver is empty"},
		{[]string{"trace", "-o", ""}, "flexgv trace: --output is empty"},
		{[]string{"run", "--mem", "1.5B"}, `"1.5B" is not a whole number of bytes`},
		{[]string{"run", "--mem", "0.3B"}, `"0.3B" is not a whole number of bytes`},
		{[]string{"run", "--mem", "1.0000001KiB"}, `"1.0000001KiB" is not a whole number of bytes`},
		{[]string{"run", "--mem", "512KiB"}, "--mem 512KiB: 512KiB is below 1MiB: too small for a CUDA program"},
		{[]string{"run", "--mem", "0.001%"}, "is below 1MiB: too small for a CUDA program"},
		{[]string{"run", "--mem", "1GiB", "--ctx-mem", ""}, `--ctx-mem: "" is not a size`},
		{[]string{"run", "--mem", "1GiB", "--ctx-mem", "512KiB"}, "--ctx-mem 512KiB: below 16MiB"},
		{[]string{"run", "--mem", "1GiB", "--ctx-mem", "17GiB"}, "--ctx-mem 17GiB: more than the smallest device has (16GiB)"},
		{[]string{"trace", "--slots", "65537"}, "--slots must be at least 2 and at most 65536, got 65537"},
		{[]string{"trace", "--slots", "4294967297"}, "at most 65536, got 4294967297"},
	} {
		e.refuse(2, c.msg, "flexgv", c.args...)
	}
	// Without NVML the devices' sizes are unknown: --ctx-mem is bounded by 64GiB.
	noLib := t.TempDir()
	r := e.runIn(noLib, "flexgv", "run", "--mem", "1GiB", "--ctx-mem", "65GiB", "--", "sh", "-c", "echo started")
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "--ctx-mem 65GiB: above 64GiB (the devices' sizes are unknown)") {
		t.Errorf("--ctx-mem 65GiB without NVML: %+v", r)
	}
}

// A quota below what a context takes is allowed, with a warning.
func TestRefusalBecomesAWarningForAQuotaBelowAContext(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2", "FLEXGV_SIM_MEM=16GiB")
	warning := "flexgv: warning: %s: quota %s is below what one CUDA context takes (about %s, --ctx-mem); " +
		"CUDA programs in this tenant will fail to create a context\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mem", "256MiB"}, fmt.Sprintf(warning, "every device", "256MiB", "512MiB")},
		{[]string{"--mem", "0=1GiB,1=100MiB", "--ctx-mem", "128MiB"}, fmt.Sprintf(warning, "device 1", "100MiB", "128MiB")},
		{[]string{"--mem", "1GiB"}, ""},
		{[]string{"--mem", "256MiB", "--ctx-mem", "64MiB"}, ""},
	} {
		args := append(append([]string{"run"}, c.args...), "--", "sh", "-c", "echo started")
		r := e.run("flexgv", args...)
		if r.code != 0 || r.stdout != "started\n" || r.stderr != c.want {
			t.Errorf("flexgv %s: exit %d, stdout %q, stderr %q; want it to run, warning %q",
				strings.Join(args, " "), r.code, r.stdout, r.stderr, c.want)
		}
	}
}

func TestRefusalsOfTheShim(t *testing.T) {
	shim := filepath.Join(build, "lib", "libflexgv.so")
	data, err := os.ReadFile(shim)
	if err != nil {
		t.Fatal(err)
	}
	machine, arch := elf.EM_AARCH64, "arm64"
	if runtime.GOARCH == "arm64" {
		machine, arch = elf.EM_X86_64, "amd64"
	}
	binary.LittleEndian.PutUint16(data[18:], uint16(machine)) // e_machine
	foreign := filepath.Join(t.TempDir(), "libflexgv.so")
	os.WriteFile(foreign, data, 0o755)
	nvml := filepath.Join(build, "sim", "libnvidia-ml.so.1")

	// A copy of the CLI whose build layout holds something else.
	dir := t.TempDir()
	cli, bad := filepath.Join(dir, "bin", "flexgv"), filepath.Join(dir, "lib", "libflexgv.so")
	exe, _ := os.ReadFile(bin("flexgv"))
	os.MkdirAll(filepath.Dir(cli), 0o755)
	os.MkdirAll(filepath.Dir(bad), 0o755)
	os.WriteFile(cli, exe, 0o755)
	os.WriteFile(bad, []byte("not a library\n"), 0o644)

	e := newEnv(t)
	e.refuse(2, "--shim /etc/passwd: not an ELF shared object", "flexgv", "run", "--shim", "/etc/passwd")
	e.refuse(2, "--shim "+foreign+": built for "+arch+", this machine is "+runtime.GOARCH, "flexgv", "trace", "--shim", foreign)
	e.refuse(2, "--shim "+nvml+": does not export cuGetProcAddress_v2; is it libflexgv.so?", "flexgv", "run", "--shim", nvml)
	e.refuse(2, bad+": not an ELF shared object", cli, "run")
	newEnv(t, "FLEXGV_SHIM="+foreign).refuse(2, "FLEXGV_SHIM="+foreign+": built for "+arch, "flexgv", "run")
}

// Programs are looked up, and refused, as a shell does.
func TestRefusalsOfPrograms(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("echo started\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	e := newEnv(t, "PATH="+dir+":"+os.Getenv("PATH"))
	for _, c := range []struct {
		prog string
		code int
		msg  string
	}{
		{dir, 126, "cannot run " + dir + ": is a directory"},
		{plain, 126, "cannot run " + plain + ": permission denied"},
		{"plain", 126, "cannot run plain: permission denied"},
		{"sub", 127, "cannot run sub: no such program"},
		{"no-such-program", 127, "cannot run no-such-program: no such program"},
	} {
		r := e.run("flexgv", "run", "--", c.prog)
		if r.code != c.code || r.stdout != "" || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv run -- %s: exit %d, stdout %q, stderr %q; want exit %d and %q", c.prog, r.code, r.stdout, r.stderr, c.code, c.msg)
		}
	}
}

// trapper prints INT for every SIGINT it handles; a second SIGINT after the
// first has been handled is handled during the second sleep.
var trapper = []string{"run", "--", "sh", "-c", `trap "echo INT" INT; echo ready; sleep 1; sleep 1`}

// Ctrl-C in a terminal reaches the program once: from the terminal, not
// again from flexgv. flexgv is stopped while the terminal sends it, so that
// the program has handled it before flexgv could pass it on: two deliveries
// close together would merge into one pending signal and go unseen.
func TestSignalCtrlCReachesTheProgramOnce(t *testing.T) {
	master, slave := openPty(t)
	defer master.Close()
	cmd := exec.Command(bin("flexgv"), trapper...)
	cmd.Env = newEnv(t).environ(filepath.Join(build, "sim"))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	err := cmd.Start()
	slave.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	master.SetDeadline(time.Now().Add(10 * time.Second))
	out := bufio.NewReader(master)
	for line := ""; line != "ready\r\n"; {
		if line, err = out.ReadString('\n'); err != nil {
			t.Fatalf("no ready: %v", err)
		}
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	master.Write([]byte{0x03})
	for line := ""; !strings.HasSuffix(line, "INT\r\n"); {
		if line, err = out.ReadString('\n'); err != nil {
			t.Fatalf("Ctrl-C did not reach the program: %v", err)
		}
	}
	cmd.Process.Signal(syscall.SIGCONT)
	var rest bytes.Buffer
	rest.ReadFrom(out) // until the program and flexgv have closed the terminal
	cmd.Wait()
	if strings.Contains(rest.String(), "INT") {
		t.Fatalf("the program handled SIGINT again after flexgv went on:\n%s", rest.String())
	}
}

// kill -INT of flexgv, which has no terminal, is passed on to the program.
func TestSignalKillReachesTheProgramOnce(t *testing.T) {
	cmd := exec.Command(bin("flexgv"), trapper...)
	cmd.Env = newEnv(t).environ(filepath.Join(build, "sim"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("no ready: %q %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	var rest bytes.Buffer
	rest.ReadFrom(out)
	if err := cmd.Wait(); err != nil || rest.String() != "INT\n" {
		t.Fatalf("after kill -INT of flexgv: %v, program printed %q, want \"INT\\n\"", err, rest.String())
	}
}

// openPty opens a pseudo-terminal's master and slave ends.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	var n int
	raw, _ := master.SyscallConn()
	raw.Control(func(fd uintptr) {
		if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
			n, err = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	})
	if err == nil {
		slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	}
	if err != nil {
		master.Close()
		t.Fatalf("pseudo-terminal: %v", err)
	}
	return master, slave
}
