package main

import (
	"fmt"
	"strings"
)

// emitRemoteServer writes the executor's decoders and dispatch table.
func emitRemoteServer(entries []RemoteEntry, tables []*Table) string {
	w := &cw{}
	w.WriteString(remoteHeader)
	w.line("#include \"executor.h\"")
	w.blank()
	for _, e := range entries {
		if e.Forwarded() && !e.Fetch {
			ret := e.Ret
			if ret == "" {
				ret = "CUresult"
			}
			w.line("typedef %s (*pfn_%s)(%s);", ret, e.Name, e.ParamList())
		}
	}
	w.blank()
	for _, e := range entries {
		if e.Forwarded() {
			emitOp(w, e)
		}
	}
	w.open("const struct fgr_op_desc fgr_ops[FGR_NUM_OPS] =")
	for _, e := range entries {
		if e.Forwarded() {
			w.line("[FGR_OP_%s] = {\"%s\", op_%s, %d, %s},", e.Name, e.Name, e.Name, b2i(e.Sync), maxFrame(e))
		}
	}
	w.closeWith(";")
	w.blank()
	w.line("/* The export tables the client answers: the functions it forwards. */")
	w.open("const struct fgr_xtable fgr_xtables[] =")
	forwarded := 0
	for _, t := range tables {
		if t.Local() {
			continue
		}
		forwarded++
		var fns []string
		for _, sl := range t.Slots {
			if sl.Fn != nil {
				fns = append(fns, cf("{FGR_OP_%s, %d}, ", sl.Fn.Name, sl.Index))
			}
		}
		w.line("{{{%s}}, FGR_OP_xt_%s, {%s{0, 0}}},", uuidBytes(t.UUID), t.Name, strings.Join(fns, ""))
	}
	w.closeWith(";")
	w.blank()
	w.line("const int fgr_nxtables = %d;", forwarded)
	return w.String()
}

// emitOp writes the executor's operation for e: decode, check, call,
// record, answer.
func emitOp(w *cw, e RemoteEntry) {
	w.fn(cf("static CUresult op_%s(struct fgr_rd *rd, struct fgr_req *q)", e.Name))
	w.line("(void)q;")
	if e.Fetch {
		// The table's data words, read where the driver's table points.
		w.line("const void *const *fgr_t = fgr_real[FGR_OP_%s];", e.Name)
		w.line("(void)fgr_t;")
		w.ifThen("!fgr_rd_done(rd)", "return FGR_BAD_FRAME;")
		for _, sl := range e.Table.Slots {
			if sl.Kind == "data" {
				w.line("fgr_reply_out(q, fgr_t[%d], %d, 0, CUDA_SUCCESS);", sl.Index, sl.N)
			}
		}
		w.line("return CUDA_SUCCESS;")
		w.close()
		w.blank()
		return
	}
	args := e.args()
	// By-value parameters first, then pointers: sizes may use the former.
	for _, a := range args {
		if !a.ptr() {
			a.k.decode(w, a)
		}
	}
	for _, z := range e.Zero {
		w.line("%s = 0; /* of unknown use: as the driver was seen given it */", z)
	}
	for _, a := range args {
		if a.ptr() {
			a.k.decode(w, a)
		}
	}
	w.ifThen("!fgr_rd_done(rd)", "return FGR_BAD_FRAME;")
	for _, a := range args {
		a.k.ready(w, a)
	}
	outs := w.sub(0)
	for _, a := range args {
		a.k.alloc(outs, a)
	}
	call := fmt.Sprintf("((pfn_%s)fgr_real[FGR_OP_%s])(%s)", e.Name, e.Name, e.ArgList())
	if e.Ret != "" {
		if outs.Len() > 0 {
			w.line("CUresult fgr_r = CUDA_SUCCESS;")
			w.add(outs)
		}
		w.line("fgr_put_u64(q->reply, %s);", bitsPut(e.Ret, call))
		w.line("return CUDA_SUCCESS;")
		w.close()
		w.blank()
		return
	}
	var before []string
	if wa := waitArgs(e); wa != "" {
		before = append(before, "(fgr_r = fgr_wait("+wa+")) == FGR_GO")
	}
	if c := captureArgs(e); c != "" {
		before = append(before, "(fgr_r = "+c+") == CUDA_SUCCESS")
	}
	w.line("CUresult fgr_r = CUDA_SUCCESS;")
	for i, c := range serverChecks(args) {
		refuse := "fgr_refuse"
		if c.size {
			refuse = "fgr_refuse_size"
		}
		stmt := cf("fgr_r = %s(\"%s\", \"%s\", %s, %s);", refuse, e.Name, c.what, c.val, c.err)
		if i > 0 {
			w.elseIf("!("+c.cond+")", stmt)
		} else {
			w.ifThen("!("+c.cond+")", stmt)
		}
	}
	w.add(outs)
	before = append([]string{"fgr_r == CUDA_SUCCESS"}, before...)
	w.ifThen(strings.Join(before, " &&"+w.cont()), "fgr_r = "+call+";")
	rec := w.sub(1)
	serverRecords(rec, e, args)
	if rec.Len() > 0 {
		w.open("if (fgr_r == CUDA_SUCCESS)")
		w.add(rec)
		w.close()
	}
	if e.Drain != "" {
		w.ifThen("fgr_r == CUDA_SUCCESS", cf("fgr_r = fgr_drain(%s, %d);", e.Drain, b2i(e.PerThread() != "")))
	}
	for _, a := range args {
		a.k.unname(w, a)
	}
	for _, a := range args {
		a.k.reply(w, a)
	}
	w.line("return fgr_r;")
	w.close()
	w.blank()
}

// captureArgs is the call that deals with a copy of the program's memory
// on a stream that captures a graph (remote/executor/captured.c), "" for a
// call that makes none.
func captureArgs(e RemoteEntry) string {
	if e.Stage == "" || e.param("hStream") == nil {
		return "" // a synchronous copy: the driver refuses it in capture
	}
	pt := b2i(e.PerThread() != "")
	if e.Kinds[e.Stage].Name == "in" {
		return fmt.Sprintf("fgr_captured_upload((const void **)&%s, %s, hStream, %d)", e.Stage, bytesExpr(*e.param(e.Stage), e.Kinds[e.Stage]), pt)
	}
	return fmt.Sprintf("fgr_captured_download(hStream, %d, \"%s\")", pt, e.Name)
}

// waitArgs are fgr_wait's arguments for a call that waits for the device
// (wait= or after=), "" for another.
func waitArgs(e RemoteEntry) string {
	pt := b2i(e.PerThread() != "")
	switch {
	case e.Wait == "context":
		if e.param("ctx") != nil {
			return "FGR_WAIT_CONTEXT, (uint64_t)(uintptr_t)ctx, 0"
		}
		return "FGR_WAIT_CONTEXT, 0, 0"
	case e.Wait != "" && e.param(e.Wait).Type == "CUevent":
		return fmt.Sprintf("FGR_WAIT_EVENT, (uint64_t)(uintptr_t)%s, 0", e.Wait)
	case e.Wait != "":
		return fmt.Sprintf("FGR_WAIT_STREAM, (uint64_t)(uintptr_t)%s, %d", e.Wait, pt)
	case e.After == "null":
		return fmt.Sprintf("FGR_AFTER_STREAM, 0, %d", pt)
	case e.After != "":
		return fmt.Sprintf("FGR_AFTER_STREAM, (uint64_t)(uintptr_t)%s, %d", e.After, pt)
	}
	return ""
}

// handleVal is the u64 the executor's tables hold for a handle.
func handleVal(t, v string) string {
	if t == "CUmemGenericAllocationHandle" {
		return "(uint64_t)" + v
	}
	return "(uint64_t)(uintptr_t)" + v
}

type check struct {
	cond, what, val, err string
	size                 bool // a result's size, not a handle or address
}

// maxFrame is the largest request frame e can carry: any up to
// FGR_MAX_FRAME when a parameter's kind says so (a buffer of a size the
// caller chooses, a module image), else FGR_SMALL_FRAME (its by-value
// words, single objects, strings, kernel parameters, options and launch
// attributes are each bounded far below it). The executor refuses a
// longer frame before reading it.
func maxFrame(e RemoteEntry) string {
	for _, a := range e.args() {
		if a.k.big(a) {
			return "FGR_MAX_FRAME"
		}
	}
	return "FGR_SMALL_FRAME"
}

// serverChecks are the conditions a request must meet before the driver
// sees it: every handle it names is this connection's, every device
// address lies in this connection's memory.
func serverChecks(args []arg) []check {
	var cs []check
	for _, a := range args {
		cs = append(cs, a.k.checks(a)...)
	}
	return cs
}

// serverRecords writes what a successful call changes in the connection's
// tables: what it destroyed is forgotten, with all it owned; the handles
// and memory it returned are the connection's, owned by the Owner
// parameter's handle, else by the request's context.
func serverRecords(w *cw, e RemoteEntry, args []arg) {
	if d := e.Destroys; d != "" {
		p := e.param(d)
		if p.Type == "CUdeviceptr" {
			w.line("fgr_drop(FGR_H_MEM, (uint64_t)%s);", d)
		} else {
			w.line("fgr_drop(FGR_H_%s, %s);", p.Type, handleVal(p.Type, d))
		}
	}
	for _, a := range args {
		a.k.record(w, a)
	}
	for _, a := range args {
		a.k.name(w, a)
	}
	for _, h := range e.AsHandle { // (one the connection was not given is its from now on)
		w.ifThen(cf("(%s) && fgr_out_adopt(FGR_H_%s, %s) != 0", h[2], h[1], h[0]), "fgr_r = CUDA_ERROR_INVALID_VALUE;")
	}
}
