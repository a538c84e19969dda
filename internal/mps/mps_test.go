package mps

import (
	"strings"
	"testing"
	"time"
)

// Serves says why a probe client did not start: what it printed when it
// failed, the timeout when it hung (it is killed), and nothing when it
// started.
func TestServes(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		probe   []string
		timeout time.Duration
		want    string
	}{
		{"starts", []string{"sh", "-c", `[ "$CUDA_MPS_PIPE_DIRECTORY" = "` + dir + `" ]`}, time.Minute, ""},
		{"fails", []string{"sh", "-c", "echo cuInit: CUDA_ERROR_NOT_INITIALIZED >&2; exit 1"}, time.Minute, "failed: cuInit: CUDA_ERROR_NOT_INITIALIZED"},
		{"fails silently", []string{"false"}, time.Minute, "failed: exit status 1"},
		{"hangs", []string{"sleep", "60"}, 200 * time.Millisecond, "had no answer within 200ms, and was killed"},
		{"none", nil, time.Minute, "no probe client"},
	} {
		err := Serves(dir, c.probe, c.timeout)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
