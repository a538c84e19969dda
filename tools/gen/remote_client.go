package main

import (
	"fmt"
	"strings"
)

// emitRemoteClient writes the client's stubs, its entry point table and
// its export tables.
func emitRemoteClient(entries []RemoteEntry, tables []*Table) string {
	w := &cw{}
	w.WriteString(remoteHeader)
	w.line("#include \"client.h\"")
	w.blank()
	var unsupported []string
	for _, e := range entries {
		switch {
		case e.Table != nil || e.Disp == DispLocal:
			continue // below; remote/client/*.c
		case e.Disp == "":
			unsupported = append(unsupported, e.Name)
			w.fn(cf("FGR_EXPORT CUresult %s(%s)", e.Name, e.ParamList()))
			for _, p := range e.Params {
				w.line("(void)%s;", p.Name)
			}
			w.line("return fgr_unsupported(%d, \"%s\", \"%s\");", len(unsupported)-1, e.Name,
				strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(e.Why))
			w.close()
			w.blank()
		case e.Disp == DispWrap:
			clientStub(w, e, cf("CUresult fgr_fwd_%s(%s)", e.Name, e.ParamList()))
		default:
			clientStub(w, e, cf("FGR_EXPORT CUresult %s(%s)", e.Name, e.ParamList()))
		}
	}
	w.line("const int fgr_nunsupported = %d;", len(unsupported))
	w.blank()
	w.line("/* Each operation's entry point, for FLEXGV_REMOTE_LOG. */")
	w.open("const char *const fgr_op_names[FGR_NUM_OPS] =")
	for _, e := range entries {
		if e.Forwarded() {
			w.line("[FGR_OP_%s] = \"%s\",", e.Name, e.Name)
		}
	}
	w.closeWith(";")
	w.blank()
	w.line("/* The operations that wait for the device (syncpoints). */")
	w.open("const unsigned char fgr_op_syncs[FGR_NUM_OPS] =")
	for _, e := range entries {
		if e.Forwarded() && e.Sync {
			w.line("[FGR_OP_%s] = 1,", e.Name)
		}
	}
	w.closeWith(";")
	w.blank()
	w.line("/* The operations that may be answered \"pending\" while the device works")
	w.line(" * (wait= and after=). */")
	w.open("const unsigned char fgr_op_waits[FGR_NUM_OPS] =")
	for _, e := range entries {
		if e.Forwarded() && (e.Wait != "" || e.After != "") {
			w.line("[FGR_OP_%s] = 1,", e.Name)
		}
	}
	w.closeWith(";")
	w.blank()
	w.line("/* The operations whose first parameter is memory the server's driver")
	w.line(" * places (alloc=, but cuMemAllocManaged's, which the client maps at that")
	w.line(" * address): made again elsewhere, the driver may place it at another. */")
	w.open("const unsigned char fgr_op_places[FGR_NUM_OPS] =")
	for _, e := range entries {
		if e.Forwarded() && len(e.Params) > 0 && e.Name != "cuMemAllocManaged" {
			if _, ok := e.Alloc[e.Params[0].Name]; ok {
				w.line("[FGR_OP_%s] = 1,", e.Name)
			}
		}
	}
	w.closeWith(";")
	w.blank()
	w.line("/* What cuGetProcAddress hands out: every exported entry point. */")
	w.open("const struct fg_proc fgr_procs[] =")
	for _, e := range entries {
		if e.Table == nil {
			w.line("{\"%s\", \"%s\", %d, %d, (void *)%s},", e.Base(), e.Name, e.Version, b2i(e.PerThread() != ""), e.Name)
		}
	}
	w.closeWith(";")
	w.blank()
	w.line("const int fgr_nprocs = sizeof(fgr_procs) / sizeof(fgr_procs[0]);")
	nxt := 0
	for _, t := range tables {
		emitClientTable(w, t, &nxt)
	}
	w.blank()
	w.open("const struct fgr_table fgr_tables[] =")
	for _, t := range tables {
		w.line("{{{%s}}, xt_%s_words, sizeof xt_%s_words, xt_%s_fetch},", uuidBytes(t.UUID), t.Name, t.Name, t.Name)
	}
	w.closeWith(";")
	w.blank()
	w.line("const int fgr_ntables = %d;", len(tables))
	w.line("unsigned char fgr_xt_said[%d];", nxt+1)
	return w.String()
}

// uuidBytes are a UUID's bytes as a C initializer's list.
func uuidBytes(u [16]byte) string {
	var s []string
	for _, c := range u {
		s = append(s, fmt.Sprint(c))
	}
	return strings.Join(s, ", ")
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
	// On a capturing stream the copy becomes a graph's node: the program's
	// memory is then reached through a buffer of the server's (hostcopy.c).
	captured := func(dev string, d2h int) {
		if e.param("hStream") != nil {
			w.ifThen(cf("fgr_captures && fgr_capture_copy(&fgr_r, %s, (void *)%s, ByteCount, hStream, %d, %d)",
				dev, e.Stage, b2i(e.PerThread() != ""), d2h), "return fgr_r;")
		}
	}
	if e.param("srcDevice") != nil {
		w.ifThen(cf("fgr_heap_copyable(%s, ByteCount, &fgr_at)", e.Stage),
			cf("return fgr_heap_download(fgr_at, srcDevice, ByteCount, %s, %d);", stream, wait))
		captured("srcDevice", 1)
		w.ifThen("fgr_stage_down_wanted(ByteCount)", cf("return fgr_stage_download(%s, srcDevice, ByteCount, %s);", e.Stage, stream))
		return
	}
	w.ifThen(cf("fgr_heap_copyable(%s, ByteCount, &fgr_at)", e.Stage),
		cf("return fgr_heap_upload(dstDevice, fgr_at, ByteCount, %s, %d);", stream, wait))
	captured("dstDevice", 0)
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
		w.add(kept)
		w.close()
		w.line("return fgr_r;")
	}
	w.close()
	w.blank()
}

// emitClientTable writes a table's words, its functions and its fetch,
// which fills the words once per process: asking the driver for the table
// (and its data) when a word is forwarded or copied, locally otherwise.
func emitClientTable(w *cw, t *Table, unsupported *int) {
	// A page of its own, made read-only once filled, as the driver's are.
	page := (t.Words*8 + 4095) / 4096 * 4096
	w.blank()
	w.line("/* Export table %s, in pages of its own. */", t.Name)
	w.line("static const void *xt_%s_words[%d] __attribute__((aligned(4096)));", t.Name, page/8)
	for _, sl := range t.Slots {
		switch sl.Kind {
		case "data":
			w.line("static unsigned char xt_%s_data%d[%d];", t.Name, sl.Index, sl.N)
		case "self":
			w.line("static const void *xt_%s_self(void) { return xt_%s_words; }", t.Name, t.Name)
		case "returns":
			w.line("static const void *xt_%s_ret%d(void) { return xt_%s_words[%d]; }", t.Name, sl.Index, t.Name, sl.N)
		case "unsupported":
			// Its own function, so that each word can be told apart (said once,
			// counted by flexgv census).
			w.line("static CUresult xt_%s_no%d(void) { return fgr_xt_unsupported(%d, \"%s %s\", %d); }",
				t.Name, sl.Index, *unsupported, t.Name, uuidString(t.UUID), sl.Index)
			*unsupported++
		case "sync":
			fn := sl.Fn
			ret := fn.Ret
			if ret == "" {
				ret = "CUresult"
			}
			clientStub(w, *fn, cf("static %s %s(%s)", ret, fn.Name, fn.ParamList()))
		}
	}
	w.fn(cf("static CUresult xt_%s_fetch(void)", t.Name))
	if t.Asked() {
		w.line("CUresult r;")
		w.line("struct fgr_call c;")
		w.ifThen(cf("(r = fgr_begin(&c, FGR_OP_xt_%s, 0)) != CUDA_SUCCESS", t.Name), "return r;")
		w.ifThen("(r = fgr_roundtrip(&c)) != CUDA_SUCCESS", "return r;")
		for _, sl := range t.Slots {
			if sl.Kind == "data" {
				w.line("fgr_get_out(&c, xt_%s_data%d, %d, 0);", t.Name, sl.Index, sl.N)
			}
		}
		w.ifThen("(r = fgr_end(&c)) != CUDA_SUCCESS", "return r;")
	}
	for _, sl := range t.Slots {
		word := cf("xt_%s_words[%d] = ", t.Name, sl.Index)
		switch sl.Kind {
		case "size":
			w.line("%s(const void *)(%d * sizeof(void *));", word, t.Words)
		case "data":
			w.line("%sxt_%s_data%d;", word, t.Name, sl.Index)
		case "self":
			w.line("%s(const void *)xt_%s_self;", word, t.Name)
		case "returns":
			w.line("%s(const void *)xt_%s_ret%d;", word, t.Name, sl.Index)
		case "sync":
			w.line("%s(const void *)%s;", word, sl.Fn.Name)
		case "local":
			w.line("%s(const void *)%s;", word, sl.Func)
		case "unsupported":
			w.line("%s(const void *)xt_%s_no%d;", word, t.Name, sl.Index)
		}
	}
	w.line("return CUDA_SUCCESS;")
	w.close()
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
	w := &cw{}
	w.WriteString(remoteHeader)
	w.line("#ifndef FLEXGV_REMOTE_EXPORTS_GEN_H")
	w.line("#define FLEXGV_REMOTE_EXPORTS_GEN_H")
	w.blank()
	w.line("#include <stdarg.h>")
	w.blank()
	w.line("/* Each table's index in fgr_tables. */")
	w.open("enum")
	for i, t := range tables {
		w.line("FGR_XT_%s = %d,", t.Name, i)
	}
	w.closeWith(";")
	w.blank()
	for _, t := range tables {
		for _, sl := range t.Slots {
			if sl.Kind == "local" {
				w.line("/* %s word %d */", t.Name, sl.Index)
				w.line("%s;", sl.Proto)
			}
		}
	}
	w.blank()
	w.line("#endif")
	return w.String()
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
