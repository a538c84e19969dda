package main

import (
	"fmt"
	"strings"
)

// legacyKind is every annotated kind not yet a type of its own, told
// apart by name.
type legacyKind struct{}

func isAlloc(a arg) bool { _, ok := a.e.Alloc[a.p.Name]; return ok }

func (legacyKind) annotate(e *RemoteEntry, p *Param, ann Ann) error {
	switch dk := ann.Name; dk {
	case "alloc":
		if p.Type != "CUdeviceptr *" {
			return fmt.Errorf("alloc is for a CUdeviceptr * result, not %s", p.Name)
		}
		e.Kinds[p.Name] = Ann{Name: "out"}
		e.Alloc[p.Name] = ann.Count
		return nil
	}
	if ann.Count != "" && ann.Name != "in" && ann.Name != "out" && ann.Name != "inout" {
		return fmt.Errorf("only in, out, inout and option arrays take a count")
	}
	if !strings.HasSuffix(p.Type, "*") {
		return fmt.Errorf("%s is passed by value and needs no kind", p.Name)
	}
	e.Kinds[p.Name] = ann
	return nil
}

func (legacyKind) validate(a arg) error {
	switch k := a.ann; k.Name {
	case "in", "out", "inout":
		if pointee(a.p.Type) == "void" && k.Count == "" {
			return fmt.Errorf("%s points to void: give its size in bytes", a.p.Name)
		}
		if k.Name != "in" && a.e.Disp == DispQueue {
			return fmt.Errorf("a queued call has no results, but %s is %s", a.p.Name, a.ann.Name)
		}
	}
	return nil
}

func (legacyKind) remember(*cw, arg) {}

func (legacyKind) refuse(w *cw, a arg) {
	name, p, k := a.e.Name, a.p, a.ann
	switch k.Name {
	case "in", "out", "inout":
		w.line("uint64_t n_%s = %s ? %s : 0;", p.Name, p.Name, a.size())
		if k.Count != "" {
			w.ifThen(cf("n_%s > FGR_MAX_BUF", p.Name), cf("return fgr_unsupported(-1, \"%s\", \"a buffer over the frame limit\");", name))
		}
	}
}

func (legacyKind) put(w *cw, a arg) {
	p, k := a.p, a.ann
	switch k.Name {
	case "in", "inout":
		w.line("fgr_put_buf(&fgr_c.w, %s, n_%s);", p.Name, p.Name)
	case "out":
		w.line("fgr_put_u8(&fgr_c.w, %s != NULL);", p.Name)
	}
}

func (legacyKind) answers(a arg) bool { return a.ann.Name == "out" || a.ann.Name == "inout" }

func (legacyKind) direct(a arg) bool { return a.ann.Name == "out" && a.ann.Count != "" }

func (legacyKind) get(w *cw, a arg) {
	switch a.ann.Name {
	case "inout":
		w.line("fgr_get_out(&fgr_c, %s, n_%s, 1);", a.p.Name, a.p.Name)
	case "out":
		w.line("fgr_get_out(&fgr_c, %s, n_%s, 0);", a.p.Name, a.p.Name)
	}
}

// Device memory of a known size the connection was given.
func (legacyKind) kept(w *cw, a arg) {
	if size := a.e.Alloc[a.p.Name]; size != "" {
		w.ifThen(a.p.Name, cf("fgr_range_add((uint64_t)*%s, (uint64_t)(%s));", a.p.Name, size))
	}
}

func (legacyKind) decode(w *cw, a arg) {
	p, k := a.p, a.ann
	t := pointee(p.Type)
	switch k.Name {
	case "in", "inout":
		w.line("%s *%s = fgr_get_buf(rd, q, %s, %d);", t, p.Name, a.size(), b2i(!byteBuffer(p.Type)))
		for _, f := range structHandles[t] {
			if shadowed[f[1]] { // our copy: the driver is given its own handle
				w.ifThen(p.Name, cf("%s->%s = (%s)(uintptr_t)fgr_unshadow(FGR_H_%s, (uint64_t)(uintptr_t)%s->%s);",
					p.Name, f[0], f[1], f[1], p.Name, f[0]))
			}
		}
	case "out":
		w.line("int has_%s = fgr_get_u8(rd);", p.Name)
	}
}

func (legacyKind) ready(w *cw, a arg) {
	p := a.p
	switch a.ann.Name {
	case "out":
		w.line("%s *%s = NULL;", pointee(p.Type), p.Name)
	}
}

func (legacyKind) checks(a arg) []check {
	var cs []check
	p, k := a.p, a.ann
	t := pointee(p.Type)
	// A result other than a download's bytes is small: a size the
	// client chose is refused before anything is allocated.
	if k.Name == "out" && k.Count != "" && a.e.Stage != p.Name {
		n := a.size()
		cs = append(cs, check{fmt.Sprintf("!has_%s || %s <= FGR_SMALL_FRAME", p.Name, n), p.Name, n, "CUDA_ERROR_INVALID_VALUE", true})
	}
	if (k.Name == "in" || k.Name == "inout") && remoteHandles[t] {
		cs = append(cs, check{fmt.Sprintf("fgr_has_n(FGR_H_%s, %s, %s / sizeof(%s))", t, p.Name, a.size(), t), p.Name, "(uint64_t)0", "CUDA_ERROR_INVALID_HANDLE", false})
	}
	if k.Name == "in" || k.Name == "inout" {
		cs = append(cs, structChecks(a, t)...)
	}
	return cs
}

// Results get memory only once the checks passed: a refused call
// allocates (and pins) nothing.
func (legacyKind) alloc(w *cw, a arg) {
	if a.ann.Name == "out" {
		w.ifThen(cf("fgr_r == CUDA_SUCCESS && has_%s && !(%s = fgr_out(q, %s))", a.p.Name, a.p.Name, a.size()), "return fgr_out_failed(q);")
	}
}

func (legacyKind) record(w *cw, a arg) {
	p, k := a.p, a.ann
	t := pointee(p.Type)
	if k.Name != "out" {
		return
	}
	if size, ok := a.e.Alloc[p.Name]; ok {
		if size == "" {
			w.ifThen(p.Name, cf("fgr_mem_add_found(*%s, %s);", p.Name, a.e.owner("")))
		} else {
			w.ifThen(p.Name, cf("fgr_mem_add(*%s, %s, %s);", p.Name, size, a.e.owner("")))
		}
		return
	}
	if !remoteHandles[t] {
		return
	}
	if k.Count == "" {
		w.ifThen(p.Name, cf("fgr_add(FGR_H_%s, %s, %s);", t, handleVal(t, "*"+p.Name), a.e.owner(t)))
		return
	}
	w.line("for (uint64_t fgr_i = 0; %s && fgr_i < %s / sizeof(%s); fgr_i++)", p.Name, a.size(), t)
	w.in(cf("fgr_add(FGR_H_%s, %s, %s);", t, handleVal(t, p.Name+"[fgr_i]"), a.e.owner(t)))
}

func (legacyKind) reply(w *cw, a arg) {
	switch a.ann.Name {
	case "inout":
		w.line("fgr_reply_out(q, %s, %s, 1, fgr_r);", a.p.Name, a.size())
	case "out":
		w.ifThen("has_"+a.p.Name, cf("fgr_reply_out(q, %s, %s, 0, fgr_r);", a.p.Name, a.size()))
	}
}

func (legacyKind) big(a arg) bool {
	return (a.ann.Name == "in" || a.ann.Name == "inout") && a.ann.Count != ""
}

func (legacyKind) doc(a arg) (travel, memory string) {
	s := a.p.Name + ": " + a.ann.Name
	if a.ann.Count != "" {
		s += "[" + a.ann.Count + "]"
	}
	s = "`" + strings.ReplaceAll(s, "|", "\\|") + "`"
	if isAlloc(a) {
		return s, fmt.Sprintf("`%s` is the connection's memory from then on", a.p.Name)
	}
	return s, ""
}

func init() {
	for _, n := range []string{"in", "out", "inout", "alloc"} {
		kinds[n] = legacyKind{}
	}
}
