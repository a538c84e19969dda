package launch

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestEnvironPreloadsShimFirst(t *testing.T) {
	env := []string{"PATH=/bin", "LD_PRELOAD=/x/other.so:/s/libflexgv.so /y/third.so", "FLEXGV_DRIVER=/old"}
	got := Environ(env, "/s/libflexgv.so", Options{Driver: "/d/libcuda.so.1", Env: []string{"FLEXGV_LOG=1"}})
	want := []string{"PATH=/bin", "LD_PRELOAD=/s/libflexgv.so:/x/other.so:/y/third.so", "FLEXGV_DRIVER=/d/libcuda.so.1", "FLEXGV_LOG=1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Environ = %q\nwant %q", got, want)
	}
}

// sharedObject builds a shared object that defines the function sym.
func sharedObject(t *testing.T, sym string) string {
	t.Helper()
	dir := t.TempDir()
	src, so := filepath.Join(dir, "shim.c"), filepath.Join(dir, "libflexgv.so")
	os.WriteFile(src, []byte("void "+sym+"(void) {}\n"), 0o644)
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Skipf("cannot build a shared object: %v\n%s", err, out)
	}
	return so
}

func TestFindShimChecksTheLibrary(t *testing.T) {
	good := sharedObject(t, "cuGetProcAddress_v2")
	if got, err := FindShim(good); err != nil || got != good {
		t.Fatalf("FindShim(%s) = %s, %v", good, got, err)
	}
	text := filepath.Join(t.TempDir(), "libflexgv.so")
	os.WriteFile(text, []byte("not a library\n"), 0o644)
	foreign := filepath.Join(t.TempDir(), "libflexgv.so")
	data, _ := os.ReadFile(good)
	machine, arch := elf.EM_AARCH64, "arm64"
	if runtime.GOARCH == "arm64" {
		machine, arch = elf.EM_X86_64, "amd64"
	}
	binary.LittleEndian.PutUint16(data[18:], uint16(machine)) // e_machine
	os.WriteFile(foreign, data, 0o644)
	for _, c := range []struct{ path, msg string }{
		{"/no/such/libflexgv.so", "shim library /no/such/libflexgv.so: no such file"},
		{text, "--shim " + text + ": not an ELF shared object"},
		{t.TempDir(), ": is a directory"},
		{foreign, ": built for " + arch + ", this machine is " + runtime.GOARCH},
		{sharedObject(t, "cuInit"), ": does not export cuGetProcAddress_v2; is it libflexgv.so?"},
	} {
		if _, err := FindShim(c.path); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("FindShim(%s) = %v; want an error with %q", c.path, err, c.msg)
		}
	}
	t.Setenv("FLEXGV_SHIM", text)
	if _, err := FindShim(""); err == nil || !strings.Contains(err.Error(), "FLEXGV_SHIM="+text+": not an ELF shared object") {
		t.Errorf("FindShim with $FLEXGV_SHIM of a text file = %v", err)
	}
}

func TestFindDriverUsesLibraryPath(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "libcuda.so.1"), nil, 0o644)
	got := FindDriver([]string{"LD_LIBRARY_PATH=/nonexistent:" + dir})
	if got == "" {
		t.Fatal("driver on LD_LIBRARY_PATH not found")
	}
}

func TestRunRejectsEmptyCommandAndMissingDriver(t *testing.T) {
	if _, err := Run(nil, Options{}); err == nil {
		t.Fatal("Run with no command succeeded")
	}
	shim := sharedObject(t, "cuGetProcAddress_v2")
	code, err := Run([]string{"true"}, Options{Shim: shim, Driver: "/no/such/driver.so"})
	if err == nil || code != 2 || !strings.Contains(err.Error(), "--driver") {
		t.Fatalf("Run with a missing --driver = %d, %v", code, err)
	}
}

// A program linked with a sanitizer's runtime has it preloaded ahead of the
// shim, once; any other program, or a script, keeps the environment.
func TestSanitizerRuntimeGoesFirst(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644)
	build := func(name string, flags ...string) string {
		out := filepath.Join(dir, name)
		if b, err := exec.Command("cc", append(flags, "-o", out, src)...).CombinedOutput(); err != nil {
			t.Skipf("cannot build %s: %v\n%s", name, err, b)
		}
		return out
	}
	asan, plain := build("asan", "-fsanitize=address"), build("plain")
	script := filepath.Join(dir, "script")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	env := []string{"PATH=/bin", "LD_PRELOAD=/s/libflexgv.so:/x/other.so"}
	got := sanitizerFirst(env, asan)
	if len(got) != 2 || !regexp.MustCompile(`^LD_PRELOAD=libasan\.so\.\d+:/s/libflexgv.so:/x/other.so$`).MatchString(got[1]) {
		t.Errorf("for a program built with ASan: %q", got)
	}
	if again := sanitizerFirst(got, asan); !reflect.DeepEqual(again, got) {
		t.Errorf("preloaded twice: %q", again)
	}
	for _, p := range []string{plain, script} {
		if got := sanitizerFirst(env, p); !reflect.DeepEqual(got, env) {
			t.Errorf("%s: %q, want the environment as it was", filepath.Base(p), got)
		}
	}
}
