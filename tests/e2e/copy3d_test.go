package e2e

import "testing"

// Batches of 3D copies (cudaMemcpy3DBatchAsync, tests/clients/copy3d.c):
// the host's volume through pitched device memory into an array of 4-byte
// elements and back arrives whole, and a batch refuses what the driver
// does (with the copy at fault for CUDA 12.8's ABI, the NULL stream in
// both variants), a 3D copy's first reserved word is not looked at (as the
// driver does not); over every transport the program prints the same.
func TestMemcpy3DBatches(t *testing.T) {
	argv := []string{"copy3d"}
	local := runsLocally(t, newEnv(t), argv,
		"reserved word set: CUDA_SUCCESS\n",
		"3D batches, host to device to array and back: 0 bytes differ\n",
		"12.8's: the second copy past its array: CUDA_ERROR_INVALID_VALUE at 1\n",
		"a copy of no depth: CUDA_ERROR_INVALID_VALUE at 1; flags: CUDA_ERROR_INVALID_VALUE; the legacy stream: CUDA_ERROR_INVALID_VALUE, per thread: CUDA_ERROR_INVALID_VALUE\n",
		"rows shorter than the copy: CUDA_ERROR_INVALID_VALUE; between two arrays: CUDA_SUCCESS, of other element sizes: CUDA_ERROR_INVALID_VALUE\n")
	printsAsLocally(t, local, argv, "shm", "unix", "tcp")
}
