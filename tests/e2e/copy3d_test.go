package e2e

import (
	"strings"
	"testing"
)

// Batches of 3D copies (cudaMemcpy3DBatchAsync, tests/clients/copy3d.c):
// the host's volume through pitched device memory into an array of 4-byte
// elements and back arrives whole, and a batch refuses what the driver
// does (with the copy at fault for CUDA 12.8's ABI); over every transport
// the program prints the same.
func TestMemcpy3DBatches(t *testing.T) {
	e := newEnv(t)
	local := e.run("copy3d")
	if local.code != 0 {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	for _, want := range []string{
		"3D batches, host to device to array and back: 0 bytes differ\n",
		"12.8's: the second copy past its array: CUDA_ERROR_INVALID_VALUE at 1\n",
		"a copy of no depth: CUDA_ERROR_INVALID_VALUE at 1; flags: CUDA_ERROR_INVALID_VALUE; the legacy stream: CUDA_ERROR_INVALID_VALUE\n",
		"rows shorter than the copy: CUDA_ERROR_INVALID_VALUE; between two arrays: CUDA_SUCCESS, of other element sizes: CUDA_ERROR_INVALID_VALUE\n",
	} {
		if !strings.Contains(local.stdout, want) {
			t.Errorf("locally, lacks %q:\n%s", want, local.stdout)
		}
	}
	for _, transport := range []string{"shm", "unix", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t)
			s := e.serve(transport)
			if got := e.remote(s, "copy3d"); got.code != 0 || got.stdout != local.stdout {
				t.Errorf("remotely: exit %d\n%s\nwant\n%s\n%s", got.code, got.stdout, local.stdout, got.stderr)
			}
		})
	}
}
