package main

import (
	"fmt"
	"strings"
)

// addrKind is a device address passed by value: dev[N] (N bytes of this
// connection's memory from there), base (the start of one of its
// allocations), any (not dereferenced: not checked). The client keeps
// pinned host memory named as a device address alike from then on; the
// executor refuses an address outside the connection's memory.
type addrKind struct{ word }

func (addrKind) annotate(e *RemoteEntry, p *Param, ann Ann) error {
	switch dk := ann.Name; {
	case p.Type != "CUdeviceptr" && ((dk != "any" && dk != "dev") || p.Type != "void *"):
		// (any and dev also take a void *: a device address the call keeps, as
		// a tensor map does, or looks up, as cuMemRetainAllocationHandle does)
		return fmt.Errorf("%s is for a CUdeviceptr, not %s", dk, p.Name)
	case (dk == "dev") != (ann.Count != ""):
		return fmt.Errorf("%s: only dev takes (and needs) a size", p.Name)
	}
	e.Dev[p.Name] = ann
	return nil
}

func (addrKind) remember(w *cw, a arg) {
	if a.ann.Name == "any" {
		return
	}
	if a.e.Stage != "" { // said before the copy's shortcuts
		w.line("fgr_mirror_named((uint64_t)%s);", a.p.Name)
	} else {
		w.line("fgr_mirror_named((uint64_t)(uintptr_t)%s);", a.p.Name)
	}
}

func (addrKind) checks(a arg) []check {
	v := "(uint64_t)(uintptr_t)" + a.p.Name
	switch a.ann.Name {
	case "dev":
		return []check{{fmt.Sprintf("fgr_mem_in(%s, %s)", v, a.ann.Count), a.p.Name, v, "CUDA_ERROR_INVALID_VALUE", false}}
	case "base":
		return []check{{fmt.Sprintf("fgr_mem_base(%s)", v), a.p.Name, v, "CUDA_ERROR_INVALID_VALUE", false}}
	}
	return nil
}

func (addrKind) doc(a arg) (string, string) {
	if a.ann.Name == "any" {
		return "", ""
	}
	s := a.p.Name + ": " + a.ann.Name
	if a.ann.Count != "" {
		s += "[" + a.ann.Count + "]"
	}
	return "", "`" + strings.ReplaceAll(s, "|", "\\|") + "`"
}

// allocKind is alloc[SIZE]: an out CUdeviceptr of memory the call gives
// the connection, SIZE bytes ("" to ask the driver; ~NAME to ask the
// driver, or where it does not say, as a module's managed variables on a
// GPU, the size the call wrote to its out parameter NAME). It travels as out;
// the client keeps its range, the executor records it, owned as handles
// are (RemoteEntry.owner).
type allocKind struct{ outKind }

func (allocKind) annotate(e *RemoteEntry, p *Param, ann Ann) error {
	if p.Type != "CUdeviceptr *" {
		return fmt.Errorf("alloc is for a CUdeviceptr * result, not %s", p.Name)
	}
	e.Kinds[p.Name] = Ann{Name: "out"}
	e.Alloc[p.Name] = ann.Count
	return nil
}

// allocFallback is the size a ~NAME alloc falls back on, as C.
func allocFallback(size string) (string, bool) {
	if !strings.HasPrefix(size, "~") {
		return "", false
	}
	n := size[1:]
	return cf("%s ? *%s : 0", n, n), true
}

// The client keeps the ranges of sized allocations alone: a module's
// variables go with it, which it does not follow.
func (allocKind) kept(w *cw, a arg) {
	if size := a.e.Alloc[a.p.Name]; size != "" && !strings.HasPrefix(size, "~") {
		w.ifThen(a.p.Name, cf("fgr_range_add((uint64_t)*%s, (uint64_t)(%s));", a.p.Name, size))
	}
}

func (allocKind) record(w *cw, a arg) {
	size := a.e.Alloc[a.p.Name]
	if fb, ok := allocFallback(size); ok {
		w.ifThen(a.p.Name, cf("fgr_mem_add_found(*%s, %s, %s);", a.p.Name, fb, a.e.owner("")))
	} else if size == "" {
		w.ifThen(a.p.Name, cf("fgr_mem_add_found(*%s, 0, %s);", a.p.Name, a.e.owner("")))
	} else {
		w.ifThen(a.p.Name, cf("fgr_mem_add(*%s, %s, %s);", a.p.Name, size, a.e.owner("")))
	}
}

func (k allocKind) doc(a arg) (string, string) {
	travel, _ := k.outKind.doc(a)
	return travel, fmt.Sprintf("`%s` is the connection's memory from then on", a.p.Name)
}

func init() {
	for _, n := range []string{"dev", "base", "any"} {
		kinds[n] = addrKind{}
	}
	kinds["alloc"] = allocKind{outKind{buf{pointer{counted: true}}}}
}
