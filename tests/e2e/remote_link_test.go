package e2e

import (
	"os"
	"path/filepath"
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
	local := e.run("linker", file)
	for _, want := range []string{"junk added: CUDA_ERROR_INVALID_IMAGE", "a missing file: CUDA_ERROR_FILE_NOT_FOUND",
		"the file's kernel: CUDA_SUCCESS", "filled: 42 42", "completed after destroy: CUDA_ERROR_INVALID_HANDLE",
		"nothing to link: CUDA_ERROR_INVALID_IMAGE", "linker: ok",
		`info log: "info    : simulated GPU: 2 inputs linked"`,
		`error log (cut to its buffer): "error   : input junk is not a module of"`,
		`its error log: "error   : no kernel to link (0 inputs)"`} {
		if local.code != 0 || !strings.Contains(local.stdout, want+"\n") {
			t.Fatalf("locally (no %q): exit %d\n%s%s", want, local.code, local.stdout, local.stderr)
		}
	}
	for _, transport := range []string{"unix", "shm", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t)
			got := e.remote(e.serve(transport), "linker", file)
			if got.code != 0 || got.stdout != local.stdout {
				t.Errorf("remotely: exit %d, printed\n%s\nlocally\n%s\n%s", got.code, got.stdout, local.stdout, got.stderr)
			}
		})
	}
}
