package trace

import (
	"os"
	"testing"

	"github.com/flexgv/flexgv/internal/api"
)

func TestCreateWritesAHeaderTheShimAccepts(t *testing.T) {
	dir := t.TempDir()
	r, err := Create(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Remove()
	h := r.header()
	if h.Magic != TraceMagic || h.Version != TraceVersion || h.NAPIs != uint32(len(api.Names)) ||
		h.APIHash != api.Hash || h.NSlots != 4 || int(h.SlotSize) != SlotSize() || h.NextSlot != 1 {
		t.Fatalf("header %+v", *h)
	}
	st, err := os.Stat(r.Path)
	if err != nil || st.Size() != int64(headerSize+4*SlotSize()) {
		t.Fatalf("region file: %v, %v", st, err)
	}
	if s := r.Summarize(); len(s.Processes) != 0 || len(s.APIs) != 0 {
		t.Fatalf("an unused region summarized as %+v", s)
	}
	if _, err := Create(dir, 1); err == nil {
		t.Fatal("Create with one slot succeeded")
	}
}
