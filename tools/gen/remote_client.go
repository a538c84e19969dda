package main

import (
	"fmt"
	"strings"
)

// emitRemoteClient writes the client's stubs, its entry point table and
// its export tables.
func emitRemoteClient(entries []RemoteEntry, tables []*Table) string {
	b := &cw{}
	b.WriteString(remoteHeader)
	b.WriteString("#include \"client.h\"\n\n")
	var unsupported []string
	for _, e := range entries {
		switch {
		case e.Table != nil || e.Disp == DispLocal:
			continue // below; remote/client/*.c
		case e.Disp == "":
			unsupported = append(unsupported, e.Name)
			fmt.Fprintf(b, "FGR_EXPORT CUresult %s(%s)\n{\n", e.Name, e.ParamList())
			for _, p := range e.Params {
				fmt.Fprintf(b, "    (void)%s;\n", p.Name)
			}
			fmt.Fprintf(b, "    return fgr_unsupported(%d, \"%s\", NULL);\n}\n\n", len(unsupported)-1, e.Name)
		case e.Disp == DispWrap:
			clientStub(b, e, fmt.Sprintf("CUresult fgr_fwd_%s(%s)", e.Name, e.ParamList()))
		default:
			clientStub(b, e, fmt.Sprintf("FGR_EXPORT CUresult %s(%s)", e.Name, e.ParamList()))
		}
	}
	fmt.Fprintf(b, "const int fgr_nunsupported = %d;\n", len(unsupported))
	b.WriteString("\n/* Each operation's entry point, for FLEXGV_REMOTE_LOG. */\nconst char *const fgr_op_names[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() {
			fmt.Fprintf(b, "    [FGR_OP_%s] = \"%s\",\n", e.Name, e.Name)
		}
	}
	b.WriteString("};\n")
	b.WriteString("\n/* The operations that wait for the device (syncpoints). */\nconst unsigned char fgr_op_syncs[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() && e.Sync {
			fmt.Fprintf(b, "    [FGR_OP_%s] = 1,\n", e.Name)
		}
	}
	b.WriteString("};\n")
	b.WriteString("\n/* The operations that may be answered \"pending\" while the device works\n * (wait= and after=). */\nconst unsigned char fgr_op_waits[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() && (e.Wait != "" || e.After != "") {
			fmt.Fprintf(b, "    [FGR_OP_%s] = 1,\n", e.Name)
		}
	}
	b.WriteString("};\n")
	b.WriteString("\n/* What cuGetProcAddress hands out: every exported entry point. */\n")
	b.WriteString("const struct fg_proc fgr_procs[] = {\n")
	for _, e := range entries {
		if e.Table != nil {
			continue
		}
		pt := 0
		if e.PerThread() != "" {
			pt = 1
		}
		fmt.Fprintf(b, "    {\"%s\", \"%s\", %d, %d, (void *)%s},\n", e.Base(), e.Name, e.Version, pt, e.Name)
	}
	b.WriteString("};\n\nconst int fgr_nprocs = sizeof(fgr_procs) / sizeof(fgr_procs[0]);\n")
	nxt := 0
	for _, t := range tables {
		emitClientTable(b, t, &nxt)
	}
	b.WriteString("\nconst struct fgr_table fgr_tables[] = {\n")
	for _, t := range tables {
		fmt.Fprintf(b, "    {{{")
		for i, c := range t.UUID {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(b, "%d", c)
		}
		fmt.Fprintf(b, "}}, xt_%s_words, sizeof xt_%s_words, xt_%s_fetch},\n", t.Name, t.Name, t.Name)
	}
	fmt.Fprintf(b, "};\n\nconst int fgr_ntables = %d;\nunsigned char fgr_xt_said[%d];\n", len(tables), nxt+1)
	return b.String()
}

// clientStub writes one forwarder: encode, round trip, decode.
func clientStub(w *cw, e RemoteEntry, decl string) {
	c := e.Chunk
	if c == "" {
		w.fn(decl)
		stubBody(w, e, "")
		return
	}
	// Large copies go as several calls of at most fgr_chunk_bytes, each
	// its own frame: no size limit, bounded buffers on both sides. A
	// synchronous upload's pieces but the last are queued, so that the
	// server copies one while the next travels; the last, a syncpoint,
	// answers the first error of them all.
	upload := e.Disp == DispSync
	for _, a := range e.args() {
		if a.k.answers(a) {
			upload = false
		}
	}
	var args, whole []string
	for _, p := range e.Params {
		whole = append(whole, p.Name)
		switch {
		case p.Name == c:
			args = append(args, "fgr_n")
		case e.Dev[p.Name].Name == "dev":
			args = append(args, p.Name+" + fgr_off")
		case strings.HasPrefix(p.Type, "const "):
			args = append(args, "(const char *)"+p.Name+" + fgr_off")
		case strings.HasSuffix(p.Type, "*"):
			args = append(args, "(char *)"+p.Name+" + fgr_off")
		default:
			args = append(args, p.Name)
		}
	}
	piece := e.Name
	if upload {
		piece = "fgr_piece_" + e.Name
		args = append(args, "fgr_off + fgr_n < "+c)
		w.fn(cf("static CUresult %s(%s, int fgr_queued)", piece, e.ParamList()))
		stubBody(w, e, "fgr_queued")
	}
	w.fn(decl)
	w.line("CUresult fgr_r;")
	if e.Stage != "" {
		for _, a := range e.args() {
			a.k.remember(w, a)
		}
		copyShortcuts(w, e)
	}
	w.open(cf("if (%s > fgr_chunk_bytes)", c))
	w.open(cf("for (size_t fgr_off = 0; fgr_off < %s; fgr_off += fgr_chunk_bytes)", c))
	w.line("size_t fgr_n = %s - fgr_off < fgr_chunk_bytes ? %s - fgr_off : fgr_chunk_bytes;", c, c)
	w.ifThen(cf("(fgr_r = %s(%s)) != CUDA_SUCCESS", piece, strings.Join(args, ", ")), "return fgr_r;")
	w.close()
	w.line("return CUDA_SUCCESS;")
	w.close()
	if upload {
		w.line("return fgr_piece_%s(%s);", e.Name, strings.Join(append(whole, "0"), ", "))
		w.close()
		w.blank()
		return
	}
	stubBody(w, e, "")
}

// copyShortcuts writes, for a copy with a stage= buffer, the ways over
// shm:// that take it whole before it is cut into pieces: to or from the
// pinned heap, the GPU's straight from or into it (an asynchronous one
// queued); another of FGR_STAGE_MIN bytes or more through the staging
// areas (remote/client/stage.c, which cuts it to their size).
func copyShortcuts(w *cw, e RemoteEntry) {
	stream, wait := copyStream(e), b2i(e.param("hStream") == nil)
	w.line("uint64_t fgr_at;")
	if e.param("srcDevice") != nil {
		w.ifThen(cf("fgr_heap_copyable(%s, ByteCount, &fgr_at)", e.Stage),
			cf("return fgr_heap_download(fgr_at, srcDevice, ByteCount, %s, %d);", stream, wait))
		w.ifThen("fgr_stage_down_wanted(ByteCount)", cf("return fgr_stage_download(%s, srcDevice, ByteCount, %s);", e.Stage, stream))
		return
	}
	w.ifThen(cf("fgr_heap_copyable(%s, ByteCount, &fgr_at)", e.Stage),
		cf("return fgr_heap_upload(dstDevice, fgr_at, ByteCount, %s, %d);", stream, wait))
	how := []string{"FGR_STAGE_SYNC"}
	s := "NULL"
	if e.param("hStream") != nil {
		s, how = "hStream", nil
	}
	if e.PerThread() != "" {
		how = append(how, "FGR_STAGE_PT")
	}
	if len(how) == 0 {
		how = []string{"0"}
	}
	w.ifThen("fgr_stage_wanted(ByteCount)", cf("return fgr_stage_upload(dstDevice, %s, ByteCount, %s, %s, %d);",
		e.Stage, s, strings.Join(how, " | "), b2i(e.Disp == DispQueue)))
}

// stubBody writes a forwarder's body after its opening brace; queued, when
// not empty, is the expression that sends a synchronous call without
// waiting for its answer.
func stubBody(w *cw, e RemoteEntry, queuedBy string) {
	fail := "fgr_r"
	if e.Ret != "" {
		fail = "0"
	}
	if e.Chunk == "" || queuedBy != "" {
		w.line("CUresult fgr_r;")
	}
	if e.UVA {
		stream := "NULL"
		if e.param("hStream") != nil {
			stream = "hStream"
		}
		w.ifThen(cf("fgr_uva_copy(&fgr_r, dst, src, ByteCount, %s, %d, %d)", stream, b2i(e.PerThread() != ""), b2i(e.Disp == DispQueue)),
			"return fgr_r;")
	}
	// A device address range freed: no longer the connection's.
	if d := e.Destroys; d != "" && e.param(d).Type == "CUdeviceptr" {
		w.line("fgr_range_drop((uint64_t)%s);", d)
	}
	args := e.args()
	if e.Stage == "" { // (a copy with shortcuts said it before them)
		for _, a := range args {
			a.k.remember(w, a)
		}
	}
	for _, a := range args {
		a.k.refuse(w, a)
	}
	w.line("struct fgr_call fgr_c;")
	queued := "0"
	if e.Disp == DispQueue {
		queued = "1"
	} else if queuedBy != "" {
		queued = queuedBy
	}
	w.ifThen(cf("(fgr_r = fgr_begin(&fgr_c, FGR_OP_%s, %s)) != CUDA_SUCCESS", e.Name, queued), "return "+fail+";")
	for _, a := range args {
		if !a.ptr() {
			a.k.put(w, a)
		}
	}
	for _, a := range args {
		if a.ptr() {
			a.k.put(w, a)
		}
	}
	if e.Disp == DispQueue && e.PinnedWait {
		sync := "cuStreamSynchronize(NULL)"
		if e.PerThread() != "" {
			sync = "cuStreamSynchronize_ptsz(NULL)"
		}
		w.ifThen("(fgr_r = fgr_send(&fgr_c)) == CUDA_SUCCESS && fgr_pinned_host((uint64_t)dstDevice)", "fgr_r = "+sync+";")
		w.line("return fgr_r;")
		w.close()
		w.blank()
		return
	}
	if e.Disp == DispQueue {
		w.line("return fgr_send(&fgr_c);")
		w.close()
		w.blank()
		return
	}
	if queuedBy != "" {
		w.ifThen(queuedBy, "return fgr_send(&fgr_c);")
	}
	var outs []arg
	for _, a := range args {
		if a.k.answers(a) {
			outs = append(outs, a)
		}
	}
	if len(outs) == 1 && outs[0].k.direct(outs[0]) {
		w.line("fgr_c.direct = %s;", outs[0].p.Name)
		w.line("fgr_c.direct_n = n_%s;", outs[0].p.Name)
	}
	w.ifThen("(fgr_r = fgr_roundtrip(&fgr_c)) != CUDA_SUCCESS", "return "+fail+";")
	if e.Ret != "" {
		// The driver's function answers a value, not a CUresult.
		w.line("uint64_t fgr_v = fgr_c.result == CUDA_SUCCESS ? fgr_get_u64(&fgr_c.r) : 0;")
		w.line("fgr_end(&fgr_c);")
		w.line("return %s;", bitsGet(e.Ret, "fgr_v"))
		w.close()
		w.blank()
		return
	}
	for _, a := range args {
		a.k.get(w, a)
	}
	kept := w.sub(1)
	for _, a := range args {
		a.k.kept(kept, a)
	}
	if kept.Len() == 0 {
		w.line("return fgr_end(&fgr_c);")
	} else {
		w.open("if ((fgr_r = fgr_end(&fgr_c)) == CUDA_SUCCESS)")
		w.WriteString(kept.String())
		w.close()
		w.line("return fgr_r;")
	}
	w.close()
	w.blank()
}

// emitClientTable writes a table's words, its functions and its fetch,
// which fills the words once per process: asking the driver for the table
// (and its data) when a word is forwarded or copied, locally otherwise.
func emitClientTable(b *cw, t *Table, unsupported *int) {
	// A page of its own, made read-only once filled, as the driver's are.
	page := (t.Words*8 + 4095) / 4096 * 4096
	fmt.Fprintf(b, "\n/* Export table %s, in pages of its own. */\nstatic const void *xt_%s_words[%d] __attribute__((aligned(4096)));\n", t.Name, t.Name, page/8)
	for _, sl := range t.Slots {
		switch sl.Kind {
		case "data":
			fmt.Fprintf(b, "static unsigned char xt_%s_data%d[%d];\n", t.Name, sl.Index, sl.N)
		case "self":
			fmt.Fprintf(b, "static const void *xt_%s_self(void) { return xt_%s_words; }\n", t.Name, t.Name)
		case "returns":
			fmt.Fprintf(b, "static const void *xt_%s_ret%d(void) { return xt_%s_words[%d]; }\n", t.Name, sl.Index, t.Name, sl.N)
		case "unsupported":
			// Its own function, so that each word can be told apart (said once,
			// counted by flexgv census).
			fmt.Fprintf(b, "static CUresult xt_%s_no%d(void) { return fgr_xt_unsupported(%d, \"%s %s\", %d); }\n",
				t.Name, sl.Index, *unsupported, t.Name, uuidString(t.UUID), sl.Index)
			*unsupported++
		case "sync":
			fn := sl.Fn
			ret := fn.Ret
			if ret == "" {
				ret = "CUresult"
			}
			clientStub(b, *fn, fmt.Sprintf("static %s %s(%s)", ret, fn.Name, fn.ParamList()))
		}
	}
	fmt.Fprintf(b, "static CUresult xt_%s_fetch(void)\n{\n", t.Name)
	if t.Asked() {
		b.WriteString("    CUresult r;\n    struct fgr_call c;\n")
		fmt.Fprintf(b, "    if ((r = fgr_begin(&c, FGR_OP_xt_%s, 0)) != CUDA_SUCCESS)\n        return r;\n", t.Name)
		b.WriteString("    if ((r = fgr_roundtrip(&c)) != CUDA_SUCCESS)\n        return r;\n")
		for _, sl := range t.Slots {
			if sl.Kind == "data" {
				fmt.Fprintf(b, "    fgr_get_out(&c, xt_%s_data%d, %d, 0);\n", t.Name, sl.Index, sl.N)
			}
		}
		b.WriteString("    if ((r = fgr_end(&c)) != CUDA_SUCCESS)\n        return r;\n")
	}
	for _, sl := range t.Slots {
		w := fmt.Sprintf("    xt_%s_words[%d] = ", t.Name, sl.Index)
		switch sl.Kind {
		case "size":
			fmt.Fprintf(b, "%s(const void *)(%d * sizeof(void *));\n", w, t.Words)
		case "data":
			fmt.Fprintf(b, "%sxt_%s_data%d;\n", w, t.Name, sl.Index)
		case "self":
			fmt.Fprintf(b, "%s(const void *)xt_%s_self;\n", w, t.Name)
		case "returns":
			fmt.Fprintf(b, "%s(const void *)xt_%s_ret%d;\n", w, t.Name, sl.Index)
		case "sync":
			fmt.Fprintf(b, "%s(const void *)%s;\n", w, sl.Fn.Name)
		case "local":
			fmt.Fprintf(b, "%s(const void *)%s;\n", w, sl.Func)
		case "unsupported":
			fmt.Fprintf(b, "%s(const void *)xt_%s_no%d;\n", w, t.Name, sl.Index)
		}
	}
	b.WriteString("    return CUDA_SUCCESS;\n}\n")
}

// uuidString writes a table's UUID as the census does: its bytes in memory
// order, grouped 8-4-4-4-12.
func uuidString(u [16]byte) string {
	h := fmt.Sprintf("%x", u)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// emitClientExports declares the hand-written functions of the tables'
// local words, for their definitions and for the tables.
func emitClientExports(tables []*Table) string {
	var b strings.Builder
	b.WriteString(remoteHeader)
	b.WriteString("#ifndef FLEXGV_REMOTE_EXPORTS_GEN_H\n#define FLEXGV_REMOTE_EXPORTS_GEN_H\n\n#include <stdarg.h>\n\n")
	b.WriteString("/* Each table's index in fgr_tables. */\nenum {\n")
	for i, t := range tables {
		fmt.Fprintf(&b, "    FGR_XT_%s = %d,\n", t.Name, i)
	}
	b.WriteString("};\n\n")
	for _, t := range tables {
		for _, sl := range t.Slots {
			if sl.Kind == "local" {
				fmt.Fprintf(&b, "/* %s word %d */\n%s;\n", t.Name, sl.Index, sl.Proto)
			}
		}
	}
	b.WriteString("\n#endif\n")
	return b.String()
}

// copyStream is the stream a copy's entry point names, the per-thread
// default one by its handle.
func copyStream(e RemoteEntry) string {
	switch {
	case e.param("hStream") != nil && e.PerThread() != "":
		return "hStream ? hStream : CU_STREAM_PER_THREAD"
	case e.param("hStream") != nil:
		return "hStream"
	case e.PerThread() != "":
		return "CU_STREAM_PER_THREAD"
	}
	return "NULL"
}
