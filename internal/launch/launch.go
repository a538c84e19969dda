// Package launch starts a program under the shim: it finds libflexgv.so and
// the CUDA driver, prepares the environment and passes the program's exit
// status through.
package launch

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Options say how to start the program.
type Options struct {
	Shim   string   // path of libflexgv.so; found next to the CLI when empty
	Driver string   // CUDA driver to load instead of libcuda.so.1
	Env    []string // extra KEY=VALUE settings for the shim
	Stderr io.Writer
}

// FindShim returns the absolute path of libflexgv.so: the given path, else
// $FLEXGV_SHIM, else the build layout next to this executable. Whichever it
// is must be a shared object the dynamic loader can preload here.
func FindShim(given string) (string, error) {
	name := "--shim " + given
	if given == "" {
		given = os.Getenv("FLEXGV_SHIM")
		name = "FLEXGV_SHIM=" + given
	}
	if given != "" {
		abs, err := filepath.Abs(given)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("shim library %s: %w", given, errors.Unwrap(err))
		}
		if err := checkShim(abs); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return abs, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(exe)
	for _, c := range []string{filepath.Join(dir, "..", "lib", "libflexgv.so"), filepath.Join(dir, "libflexgv.so")} {
		if _, err := os.Stat(c); err == nil {
			c = filepath.Clean(c)
			if err := checkShim(c); err != nil {
				return "", fmt.Errorf("%s: %w", c, err)
			}
			return c, nil
		}
	}
	return "", fmt.Errorf("cannot find libflexgv.so next to %s (build it with make, or pass --shim)", exe)
}

// machines are the ELF machines of the architectures Go builds flexgv for.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "ppc64le": elf.EM_PPC64, "386": elf.EM_386,
	"arm": elf.EM_ARM, "riscv64": elf.EM_RISCV, "s390x": elf.EM_S390, "loong64": elf.EM_LOONGARCH,
}

// checkShim refuses what the dynamic loader would not preload, or would
// preload without effect: the loader only warns about a bad LD_PRELOAD entry
// and runs the program anyway, unvirtualized.
func checkShim(path string) error {
	f, err := elf.Open(path)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	if err != nil {
		return errors.New("not an ELF shared object")
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		return errors.New("not an ELF shared object")
	}
	if want, ok := machines[runtime.GOARCH]; ok && f.Machine != want {
		arch := f.Machine.String()
		for a, m := range machines {
			if m == f.Machine {
				arch = a
			}
		}
		return fmt.Errorf("built for %s, this machine is %s", arch, runtime.GOARCH)
	}
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Name == "cuGetProcAddress_v2" && s.Section != elf.SHN_UNDEF {
			return nil
		}
	}
	return errors.New("does not export cuGetProcAddress_v2; is it libflexgv.so?")
}

// driverDirs are searched, after LD_LIBRARY_PATH and the ld.so cache, for
// the driver library the way the dynamic loader would find it.
var driverDirs = []string{"/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
	"/usr/lib64", "/lib64", "/usr/lib", "/lib"}

// FindDriver reports where libcuda.so.1 would be loaded from, or "".
func FindDriver(env []string) string {
	var dirs []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
			dirs = append(dirs, filepath.SplitList(v)...)
		}
	}
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if i := strings.Index(line, "=> "); i >= 0 && strings.Contains(line, "libcuda.so.1 ") {
				return strings.TrimSpace(line[i+3:])
			}
		}
	}
	dirs = append(dirs, driverDirs...)
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, "libcuda.so.1")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Environ returns env with the shim preloaded first and the options applied.
func Environ(env []string, shim string, o Options) []string {
	out := make([]string, 0, len(env)+len(o.Env)+2)
	preload := shim
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			for _, p := range preloads(v) {
				if p != shim {
					preload += ":" + p
				}
			}
			continue
		}
		if strings.HasPrefix(kv, "FLEXGV_DRIVER=") && o.Driver != "" {
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "LD_PRELOAD="+preload)
	if o.Driver != "" {
		out = append(out, "FLEXGV_DRIVER="+o.Driver)
	}
	return append(out, o.Env...)
}

// preloads are the entries of LD_PRELOAD, which colons or spaces separate.
func preloads(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ' ' })
}

// sanitizer is the runtime of a sanitizer that must come first among a
// program's libraries (AddressSanitizer's, ThreadSanitizer's, ...), as
// linked: libasan.so.8.
var sanitizer = regexp.MustCompile(`^lib(asan|hwasan|tsan|msan)\.so(\.[0-9]+)*$`)

// sanitizerFirst preloads the sanitizer runtime a program is linked with
// ahead of the shim: such a runtime refuses to start behind another
// preloaded library, and from first place it leaves the shim in front of
// the driver all the same.
func sanitizerFirst(env []string, program string) []string {
	f, err := elf.Open(program)
	if err != nil {
		return env // a script, or not ELF: its interpreter is what loads
	}
	libs, _ := f.ImportedLibraries()
	f.Close()
	for _, l := range libs {
		if !sanitizer.MatchString(l) {
			continue
		}
		out := slices.Clone(env)
		for i, kv := range out {
			if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok && !slices.Contains(preloads(v), l) {
				out[i] = "LD_PRELOAD=" + l + ":" + v
			}
		}
		return out
	}
	return env
}

// driverLink makes a private folder whose only file, libcuda.so.1, links to
// driver: first on the program's LD_LIBRARY_PATH, it is what the program's
// own dlopen("libcuda.so.1") or its -lcuda finds, whatever the driver file
// is named, without bringing the rest of the driver's folder along.
func driverLink(driver string) (string, error) {
	dir, err := os.MkdirTemp("", "flexgv-driver-")
	if err != nil {
		return "", fmt.Errorf("--driver: %w", err)
	}
	if err := os.Symlink(driver, filepath.Join(dir, "libcuda.so.1")); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("--driver: %w", err)
	}
	return dir, nil
}

// prependLibraryPath puts dir first on env's LD_LIBRARY_PATH.
func prependLibraryPath(env []string, dir string) []string {
	out := make([]string, 0, len(env)+1)
	path := dir
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
			if v != "" {
				path += ":" + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LD_LIBRARY_PATH="+path)
}

// Run starts argv under the shim, forwards the termination signals that
// would not reach it otherwise and returns its exit code (128+N when signal
// N ended it).
func Run(argv []string, o Options) (int, error) {
	if len(argv) == 0 {
		return 2, errors.New("no command given")
	}
	shim, err := FindShim(o.Shim)
	if err != nil {
		return 2, err
	}
	if o.Driver != "" {
		abs, err := filepath.Abs(o.Driver)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return 2, fmt.Errorf("--driver %s: no such file", o.Driver)
		}
		o.Driver = abs
	}
	env := Environ(os.Environ(), shim, o)
	if o.Driver != "" {
		dir, err := driverLink(o.Driver)
		if err != nil {
			return 1, err
		}
		defer os.RemoveAll(dir)
		env = prependLibraryPath(env, dir)
	}
	if o.Driver == "" && FindDriver(env) == "" && o.Stderr != nil {
		fmt.Fprintln(o.Stderr, "flexgv: warning: no CUDA driver (libcuda.so.1) in LD_LIBRARY_PATH, the ld.so cache or the usual "+
			"driver folders; the program's CUDA calls will fail as they would without flexgv. "+
			"Pass --driver, or put the simulated GPU (build/sim) on LD_LIBRARY_PATH.")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return notRunnable(argv[0], err)
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = sanitizerFirst(env, path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 126, fmt.Errorf("cannot run %s: %w", argv[0], err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if (s == syscall.SIGINT || s == syscall.SIGQUIT) && inForeground() {
					continue // the terminal sent it to the program too
				}
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 1, err
}

// notRunnable says why a program lookup failed, with a shell's exit status:
// 126 for what exists but cannot be executed, 127 for what does not exist.
func notRunnable(name string, err error) (int, error) {
	switch {
	case errors.Is(err, syscall.EISDIR):
		return 126, fmt.Errorf("cannot run %s: is a directory", name)
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, exec.ErrNotFound) && inPath(name):
		return 126, fmt.Errorf("cannot run %s: permission denied", name)
	}
	return 127, fmt.Errorf("cannot run %s: no such program", name)
}

// inPath reports whether $PATH has a file (executable or not) named name.
func inPath(name string) bool {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}

// inForeground reports whether flexgv is in the foreground process group of
// its terminal, where Ctrl-C and Ctrl-\ reach the program without flexgv.
func inForeground() bool {
	tty, err := unix.Open("/dev/tty", unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(tty)
	pgrp, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
