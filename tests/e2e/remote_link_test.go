package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// JIT linking remotely: data and a file (read by the client) added to a
// link state of the server's, the linked image read back and loaded, its
// kernel run; a bad input, a missing file, an empty link and a destroyed
// state refused as locally; the state's info and error logs written by
// later calls reach the program's buffers (cut to their sizes); over every
// transport as locally.
func TestRemoteLinkAsLocally(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(t.TempDir(), "other.mod")
	if err := os.WriteFile(file, []byte("FLEXGV-SIM-MODULE\nkernel other 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	local := runsLocally(t, e, []string{"linker", file}, "junk added: CUDA_ERROR_INVALID_IMAGE\n",
		"a missing file: CUDA_ERROR_FILE_NOT_FOUND\n", "the file's kernel: CUDA_SUCCESS\n", "filled: 42 42\n",
		"completed after destroy: CUDA_ERROR_INVALID_HANDLE\n", "nothing to link: CUDA_ERROR_INVALID_IMAGE\n", "linker: ok\n",
		`info log: "info    : simulated GPU: 2 inputs linked"`+"\n",
		`error log (cut to its buffer): "error   : input junk is not a module of"`+"\n",
		`its error log: "error   : no kernel to link (0 inputs)"`+"\n")
	printsAsLocally(t, local, []string{"linker", file}, "unix", "shm", "tcp")
}

// FLEXGV_REMOTE_LOG=trace says each call the client sends as it goes, by
// thread, whether it waits or is queued, and what a call that waits was
// answered when it was not success; the program prints what it prints
// without it. A setting it does not know is said, and refused.
func TestRemoteLogTrace(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(t.TempDir(), "other.mod")
	if err := os.WriteFile(file, []byte("FLEXGV-SIM-MODULE\nkernel other 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := e.serve("unix")
	plain := e.remote(s, "linker", file)
	e.extra = append(e.extra, "FLEXGV_REMOTE_LOG=trace")
	traced := e.remote(s, "linker", file)
	if traced.code != 0 || traced.stdout != plain.stdout {
		t.Fatalf("traced: exit %d, printed\n%s\nwithout the trace\n%s", traced.code, traced.stdout, plain.stdout)
	}
	for _, re := range []string{
		`(?m)^flexgv remote: \[\d+\] cuLinkCreate_v2$`,
		`(?m)^flexgv remote: \[\d+\] cuLaunchKernel \(queued\)$`,
		`(?m)^flexgv remote: cuLinkAddData_v2: CUDA_ERROR_INVALID_IMAGE$`,
		`(?m)^flexgv remote: \[\d+\] fgrLinkLogs$`,
	} {
		if !regexp.MustCompile(re).MatchString(traced.stderr) {
			t.Errorf("the trace has no line %s:\n%s", re, traced.stderr)
		}
	}
	if strings.Contains(plain.stderr, "cuLinkCreate_v2") {
		t.Errorf("traced without FLEXGV_REMOTE_LOG:\n%s", plain.stderr)
	}
	e.extra[len(e.extra)-1] = "FLEXGV_REMOTE_LOG=everything"
	bad := e.remote(s, "linker", file)
	if bad.code == 0 || !strings.Contains(bad.stderr, "FLEXGV_REMOTE_LOG=everything: the settings are errors, calls and trace") {
		t.Errorf("an unknown setting: exit %d\n%s", bad.code, bad.stderr)
	}
}
