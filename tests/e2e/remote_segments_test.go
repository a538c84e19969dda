package e2e

import (
	"strings"
	"testing"
)

// PyTorch's expandable segments remotely: a reserved range grown by
// mapping pages (a fabric handle refused, a file descriptor's taken), a
// memset and a stream write across segments, the range and attributes of
// an address in them, a segment exported, all given back — as locally.
func TestRemoteExpandableSegments(t *testing.T) {
	e := newEnv(t)
	local := e.run("memclient", "segments")
	if local.code != 0 || !strings.Contains(local.stdout, "given back") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	printsAsLocally(t, local, []string{"memclient", "segments"}, "shm", "unix", "tcp")
}
