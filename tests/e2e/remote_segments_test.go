package e2e

import "testing"

// PyTorch's expandable segments remotely: a reserved range grown by
// mapping pages (a fabric handle refused, a file descriptor's taken), a
// memset and a stream write across segments, the range and attributes of
// an address in them, a segment exported, all given back — as locally.
func TestRemoteExpandableSegments(t *testing.T) {
	argv := []string{"memclient", "segments"}
	local := runsLocally(t, newEnv(t), argv, "first words: 0x1020304 0x1020304 77 0x1020304\n",
		"range of an address in the second segment: CUDA_SUCCESS, from its start yes, one segment\n", "given back")
	printsAsLocally(t, local, argv, "shm", "unix", "tcp")
}
