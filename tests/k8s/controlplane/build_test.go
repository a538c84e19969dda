package controlplane

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The control plane's build reports the packages compiled as they come,
// and gives the output's end with its error.
func TestRunCounting(t *testing.T) {
	var seen []int
	out, err := runCounting(exec.Command("sh", "-c", "echo a; echo b; echo c >&2; exit 3"), -1, func(n int) { seen = append(seen, n) })
	if err == nil || !strings.HasSuffix(out, "c") || strings.Count(out, "\n") != 2 {
		t.Errorf("runCounting: %v, %q", err, out)
	}
	if !slices.Equal(seen, []int{1, 2, 3}) {
		t.Errorf("progress at %v, want every line: 1 2 3", seen)
	}
}
