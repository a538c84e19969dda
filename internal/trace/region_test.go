package trace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenRejectsForeignFiles(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, make([]byte, 4096), 0o644)
	if _, err := Open(junk); err == nil || !strings.Contains(err.Error(), "not a trace region") {
		t.Fatalf("Open(junk) = %v, want a 'not a trace region' error", err)
	}
	r, err := Create(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Remove()
	o, err := Open(r.Path)
	if err != nil {
		t.Fatalf("Open of a fresh region: %v", err)
	}
	s := o.Summarize()
	o.Close()
	if len(s.Processes) != 0 || len(s.APIs) != 0 {
		t.Fatalf("fresh region summarized as %+v", s)
	}
	if _, err := Create(dir, 1); err == nil {
		t.Fatal("Create with one slot succeeded")
	}
}
