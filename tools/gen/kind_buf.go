package main

import "fmt"

// buf is a buffer: in[COUNT], out[COUNT], inout[COUNT], COUNT objects of
// the pointed-to type (one when not given; bytes for a void *). The
// client counts its bytes (n_PARAM, 0 for NULL), refusing more than a
// frame holds.
type buf struct{ pointer }

func (buf) validate(a arg) error {
	if pointee(a.p.Type) == "void" && a.ann.Count == "" {
		return fmt.Errorf("%s points to void: give its size in bytes", a.p.Name)
	}
	return nil
}

func (buf) refuse(w *cw, a arg) {
	w.line("uint64_t n_%s = %s ? %s : 0;", a.p.Name, a.p.Name, a.size())
	if a.ann.Count != "" {
		w.ifThen(cf("n_%s > FGR_MAX_BUF", a.p.Name), cf("return fgr_unsupported(-1, \"%s\", \"a buffer over the frame limit\");", a.e.Name))
	}
}

// name: the client is given names for the handles the call returned,
// never the driver's values (a handle that has none, for want of memory,
// fails the call).
func (buf) name(w *cw, a arg) {
	t := pointee(a.p.Type)
	if a.ann.Name == "in" || !remoteHandles[t] {
		return
	}
	n := "1"
	if a.ann.Count != "" {
		n = fmt.Sprintf("%s / sizeof(%s)", outSize(a), t)
	}
	w.ifThen(cf("fgr_out_n(FGR_H_%s, %s, %s) != 0", t, a.p.Name, n), "fgr_r = CUDA_ERROR_OUT_OF_MEMORY;")
}

// results are refused on a queued call, which has no answer.
func (buf) noQueue(a arg) error {
	if a.e.Disp == DispQueue {
		return fmt.Errorf("a queued call has no results, but %s is %s", a.p.Name, a.ann.Name)
	}
	return nil
}

// inKind is in: the caller's bytes go in the request (fgr_put_buf), and the
// executor hands the driver them in place, or a copy aligned for the type.
// Handles among them, or in a structure of structHandles, are the client's
// names, turned into the driver's handles (fgr_in, fgr_in_n) and then
// checked as the connection's.
type inKind struct{ buf }

func (inKind) put(w *cw, a arg) { w.line("fgr_put_buf(&fgr_c.w, %s, n_%s);", a.p.Name, a.p.Name) }

func (k inKind) decode(w *cw, a arg) {
	t := pointee(a.p.Type)
	w.line("%s *%s = fgr_get_buf(rd, q, %s, %d);", t, a.p.Name, a.size(), b2i(!byteBuffer(a.p.Type)))
	for _, f := range structHandles[t] { // our copy: the driver is given its own handle
		if a.ann.Name == "inout" { // and the client gets its name back
			w.line("uint64_t fgr_name_%s_%s = %s ? (uint64_t)(uintptr_t)%s->%s : 0;", a.p.Name, f[0], a.p.Name, a.p.Name, f[0])
		}
		w.ifThen(a.p.Name, cf("%s->%s = (%s)(uintptr_t)fgr_in(FGR_H_%s, (uint64_t)(uintptr_t)%s->%s);",
			a.p.Name, f[0], f[1], f[1], a.p.Name, f[0]))
	}
	for _, f := range structAddrs[t] {
		w.ifThen(a.p.Name, cf("%s->%s = (CUdeviceptr)fgr_moved((uint64_t)%s->%s);", a.p.Name, f, a.p.Name, f))
	}
}

// An array of handles, once the whole frame is read, by the client's names.
func (inKind) ready(w *cw, a arg) {
	if t := pointee(a.p.Type); remoteHandles[t] {
		w.line("fgr_in_n(FGR_H_%s, %s, %s / sizeof(%s));", t, a.p.Name, a.size(), t)
	}
}

func (inKind) checks(a arg) []check {
	var cs []check
	if t := pointee(a.p.Type); remoteHandles[t] {
		cs = append(cs, check{fmt.Sprintf("fgr_has_n(FGR_H_%s, %s, %s / sizeof(%s))", t, a.p.Name, a.size(), t), a.p.Name, "(uint64_t)0", "CUDA_ERROR_INVALID_HANDLE", false})
	}
	return append(cs, structChecks(a, pointee(a.p.Type))...)
}

// A buffer of a size the caller chose makes a frame of any length.
func (inKind) big(a arg) bool { return a.ann.Count != "" }

// inoutKind is inout: as in, and the driver's bytes come back in the
// answer whatever the call returned (fgr_reply_out's 1).
type inoutKind struct{ inKind }

func (k inoutKind) validate(a arg) error {
	if err := k.inKind.validate(a); err != nil {
		return err
	}
	return k.noQueue(a)
}

func (inoutKind) answers(arg) bool { return true }

// The handles in its structure go back by the client's names, and those
// the call wrote there by new ones (none when it has no name).
func (inoutKind) unname(w *cw, a arg) {
	t := pointee(a.p.Type)
	for _, f := range structHandles[t] {
		w.ifThen(a.p.Name, cf("%s->%s = (%s)(uintptr_t)fgr_name_%s_%s;", a.p.Name, f[0], f[1], a.p.Name, f[0]))
	}
	for _, f := range structOutHandles[t] {
		w.ifThen(a.p.Name, cf("fgr_out_n(FGR_H_%s, &%s->%s, 1);", f[1], a.p.Name, f[0]))
	}
}

// The device memory the call wrote into its structure is the
// connection's: the client keeps its range, the executor records it,
// owned by the request's context (it outlives a graph that made it), and
// kept when freed (a graph allocates it again at each launch).
func (inoutKind) kept(w *cw, a arg) {
	for _, f := range structAllocs[pointee(a.p.Type)] {
		w.ifThen(a.p.Name, cf("fgr_range_add_kept((uint64_t)%s->%s, (uint64_t)(%s));", a.p.Name, f[0], structField(a, f[1])))
	}
}

func (inoutKind) record(w *cw, a arg) {
	for _, f := range structAllocs[pointee(a.p.Type)] {
		w.ifThen(a.p.Name, cf("fgr_mem_add_kept((uint64_t)%s->%s, (uint64_t)(%s), FGR_H_CUcontext, fgr_ctx);", a.p.Name, f[0], structField(a, f[1])))
	}
}

func (inoutKind) get(w *cw, a arg) { w.line("fgr_get_out(&fgr_c, %s, n_%s, 1);", a.p.Name, a.p.Name) }

func (inoutKind) reply(w *cw, a arg) {
	w.line("fgr_reply_out(q, %s, %s, 1, fgr_r);", a.p.Name, a.size())
}

// outKind is out: the request says only whether the caller gave a place
// (a byte); the executor gives the driver memory of the result's size (a
// size the caller chose at most FGR_SMALL_FRAME, but for a download's
// bytes) once the checks passed, and the answer carries the result back
// when the call succeeded. Handles returned are the connection's.
type outKind struct{ buf }

func (k outKind) validate(a arg) error {
	if err := k.buf.validate(a); err != nil {
		return err
	}
	return k.noQueue(a)
}

func (outKind) put(w *cw, a arg) { w.line("fgr_put_u8(&fgr_c.w, %s != NULL);", a.p.Name) }

func (outKind) answers(arg) bool { return true }

// A result of a given size alone in the answer (a download's bytes) is
// read straight into the caller's memory when large (fgr_roundtrip).
func (outKind) direct(a arg) bool { return a.ann.Count != "" }

func (outKind) get(w *cw, a arg) { w.line("fgr_get_out(&fgr_c, %s, n_%s, 0);", a.p.Name, a.p.Name) }

func (outKind) decode(w *cw, a arg) { w.line("int has_%s = fgr_get_u8(rd);", a.p.Name) }

// A counted result's size is taken before the call: the count may be an
// in-out parameter the call changes (cuGraphGetNodes), and the client
// reads back as many bytes as it asked for.
func (outKind) ready(w *cw, a arg) {
	w.line("%s *%s = NULL;", pointee(a.p.Type), a.p.Name)
	if a.ann.Count != "" {
		w.line("const uint64_t fgr_n_%s = %s;", a.p.Name, a.size())
	}
}

// outSize is a result's size after the call (fgr_n_PARAM when counted).
func outSize(a arg) string {
	if _, out := a.k.(outKind); out && a.ann.Count != "" {
		return "fgr_n_" + a.p.Name
	}
	return a.size()
}

func (outKind) checks(a arg) []check {
	if a.ann.Count == "" || a.e.Stage == a.p.Name {
		return nil
	}
	n := a.size()
	return []check{{fmt.Sprintf("!has_%s || %s <= FGR_SMALL_FRAME", a.p.Name, n), a.p.Name, n, "CUDA_ERROR_INVALID_VALUE", true}}
}

// Results get memory only once the checks passed: a refused call
// allocates (and pins) nothing.
func (outKind) alloc(w *cw, a arg) {
	w.ifThen(cf("fgr_r == CUDA_SUCCESS && has_%s && !(%s = fgr_out(q, %s))", a.p.Name, a.p.Name, outSize(a)), "return fgr_out_failed(q);")
}

func (outKind) record(w *cw, a arg) {
	t := pointee(a.p.Type)
	for _, f := range structAddrs[t] { // the program's addresses
		w.ifThen(a.p.Name, cf("%s->%s = (CUdeviceptr)fgr_unmoved((uint64_t)%s->%s);", a.p.Name, f, a.p.Name, f))
	}
	if !remoteHandles[t] {
		return
	}
	if a.ann.Count == "" {
		w.ifThen(a.p.Name, cf("fgr_add(FGR_H_%s, %s, %s);", t, handleVal(t, "*"+a.p.Name), a.e.owner(t)))
		return
	}
	w.line("for (uint64_t fgr_i = 0; %s && fgr_i < %s / sizeof(%s); fgr_i++)", a.p.Name, outSize(a), t)
	w.in(cf("fgr_add(FGR_H_%s, %s, %s);", t, handleVal(t, a.p.Name+"[fgr_i]"), a.e.owner(t)))
}

func (outKind) reply(w *cw, a arg) {
	w.ifThen("has_"+a.p.Name, cf("fgr_reply_out(q, %s, %s, 0, fgr_r);", a.p.Name, outSize(a)))
}

func init() {
	kinds["in"] = inKind{buf{pointer{counted: true}}}
	kinds["inout"] = inoutKind{inKind{buf{pointer{counted: true}}}}
	kinds["out"] = outKind{buf{pointer{counted: true}}}
}
