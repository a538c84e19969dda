package main

import (
	"fmt"
	"strings"
)

// emitRemoteClient writes the client's stubs, its entry point table and
// its export tables.
func emitRemoteClient(entries []RemoteEntry, tables []*Table) string {
	var b strings.Builder
	b.WriteString(remoteHeader)
	b.WriteString("#include \"client.h\"\n\n")
	var unsupported []string
	for _, e := range entries {
		switch {
		case e.Table != nil || e.Disp == DispLocal:
			continue // below; remote/client/*.c
		case e.Disp == "":
			unsupported = append(unsupported, e.Name)
			fmt.Fprintf(&b, "FGR_EXPORT CUresult %s(%s)\n{\n", e.Name, e.ParamList())
			for _, p := range e.Params {
				fmt.Fprintf(&b, "    (void)%s;\n", p.Name)
			}
			fmt.Fprintf(&b, "    return fgr_unsupported(%d, \"%s\", NULL);\n}\n\n", len(unsupported)-1, e.Name)
		case e.Disp == DispWrap:
			clientStub(&b, e, fmt.Sprintf("CUresult fgr_fwd_%s(%s)", e.Name, e.ParamList()))
		default:
			clientStub(&b, e, fmt.Sprintf("FGR_EXPORT CUresult %s(%s)", e.Name, e.ParamList()))
		}
	}
	fmt.Fprintf(&b, "const int fgr_nunsupported = %d;\n", len(unsupported))
	b.WriteString("\n/* Each operation's entry point, for FLEXGV_REMOTE_LOG. */\nconst char *const fgr_op_names[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() {
			fmt.Fprintf(&b, "    [FGR_OP_%s] = \"%s\",\n", e.Name, e.Name)
		}
	}
	b.WriteString("};\n")
	b.WriteString("\n/* The operations that wait for the device (syncpoints). */\nconst unsigned char fgr_op_syncs[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() && e.Sync {
			fmt.Fprintf(&b, "    [FGR_OP_%s] = 1,\n", e.Name)
		}
	}
	b.WriteString("};\n")
	b.WriteString("\n/* The operations that may be answered \"pending\" while the device works\n * (wait= and after=). */\nconst unsigned char fgr_op_waits[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() && (e.Wait != "" || e.After != "") {
			fmt.Fprintf(&b, "    [FGR_OP_%s] = 1,\n", e.Name)
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
		fmt.Fprintf(&b, "    {\"%s\", \"%s\", %d, %d, (void *)%s},\n", e.Base(), e.Name, e.Version, pt, e.Name)
	}
	b.WriteString("};\n\nconst int fgr_nprocs = sizeof(fgr_procs) / sizeof(fgr_procs[0]);\n")
	nxt := 0
	for _, t := range tables {
		emitClientTable(&b, t, &nxt)
	}
	b.WriteString("\nconst struct fgr_table fgr_tables[] = {\n")
	for _, t := range tables {
		fmt.Fprintf(&b, "    {{{")
		for i, c := range t.UUID {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d", c)
		}
		fmt.Fprintf(&b, "}}, xt_%s_words, sizeof xt_%s_words, xt_%s_fetch},\n", t.Name, t.Name, t.Name)
	}
	fmt.Fprintf(&b, "};\n\nconst int fgr_ntables = %d;\nunsigned char fgr_xt_said[%d];\n", len(tables), nxt+1)
	return b.String()
}

// clientStub writes one forwarder: encode, round trip, decode.
func clientStub(b *strings.Builder, e RemoteEntry, decl string) {
	c := e.Chunk
	if c == "" {
		fmt.Fprintf(b, "%s\n{\n", decl)
		stubBody(b, e, "")
		return
	}
	// Large copies go as several calls of at most fgr_chunk_bytes, each
	// its own frame: no size limit, bounded buffers on both sides. A
	// synchronous upload's pieces but the last are queued, so that the
	// server copies one while the next travels; the last, a syncpoint,
	// answers the first error of them all.
	upload := e.Disp == DispSync
	for _, p := range e.Params {
		if k := e.Kinds[p.Name].Name; k == "out" || k == "inout" {
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
	piece, last := e.Name, "return fgr_piece_"+e.Name+"("+strings.Join(append(whole, "0"), ", ")+");\n"
	if upload {
		piece = "fgr_piece_" + e.Name
		args = append(args, "fgr_off + fgr_n < "+c)
		fmt.Fprintf(b, "static CUresult %s(%s, int fgr_queued)\n{\n", piece, e.ParamList())
		stubBody(b, e, "fgr_queued")
	}
	fmt.Fprintf(b, "%s\n{\n", decl)
	b.WriteString("    CUresult fgr_r;\n")
	if e.Stage != "" {
		for _, p := range e.Params {
			if k := e.Dev[p.Name].Name; k == "dev" || k == "base" {
				fmt.Fprintf(b, "    fgr_mirror_named((uint64_t)%s);\n", p.Name)
			}
		}
		copyShortcuts(b, e)
	}
	fmt.Fprintf(b, "    if (%s > fgr_chunk_bytes) {\n", c)
	fmt.Fprintf(b, "        for (size_t fgr_off = 0; fgr_off < %s; fgr_off += fgr_chunk_bytes) {\n", c)
	fmt.Fprintf(b, "            size_t fgr_n = %s - fgr_off < fgr_chunk_bytes ? %s - fgr_off : fgr_chunk_bytes;\n", c, c)
	fmt.Fprintf(b, "            if ((fgr_r = %s(%s)) != CUDA_SUCCESS)\n                return fgr_r;\n", piece, strings.Join(args, ", "))
	b.WriteString("        }\n        return CUDA_SUCCESS;\n    }\n")
	if upload {
		b.WriteString("    " + last + "}\n\n")
		return
	}
	stubBody(b, e, "")
}

// copyShortcuts writes, for a copy with a stage= buffer, the ways over
// shm:// that take it whole before it is cut into pieces: to or from the
// pinned heap, the GPU's straight from or into it (an asynchronous one
// queued); another of FGR_STAGE_MIN bytes or more through the staging
// areas (remote/client/stage.c, which cuts it to their size).
func copyShortcuts(b *strings.Builder, e RemoteEntry) {
	stream, wait := copyStream(e), b2i(e.param("hStream") == nil)
	if e.param("srcDevice") != nil {
		fmt.Fprintf(b, "    uint64_t fgr_at;\n    if (fgr_heap_copyable(%s, ByteCount, &fgr_at))\n        return fgr_heap_download(fgr_at, srcDevice, ByteCount, %s, %d);\n",
			e.Stage, stream, wait)
		fmt.Fprintf(b, "    if (fgr_stage_down_wanted(ByteCount))\n        return fgr_stage_download(%s, srcDevice, ByteCount, %s);\n",
			e.Stage, stream)
		return
	}
	fmt.Fprintf(b, "    uint64_t fgr_at;\n    if (fgr_heap_copyable(%s, ByteCount, &fgr_at))\n        return fgr_heap_upload(dstDevice, fgr_at, ByteCount, %s, %d);\n",
		e.Stage, stream, wait)
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
	fmt.Fprintf(b, "    if (fgr_stage_wanted(ByteCount))\n        return fgr_stage_upload(dstDevice, %s, ByteCount, %s, %s, %d);\n",
		e.Stage, s, strings.Join(how, " | "), b2i(e.Disp == DispQueue))
}

// stubBody writes a forwarder's body after its opening brace; queued, when
// not empty, is the expression that sends a synchronous call without
// waiting for its answer.
func stubBody(b *strings.Builder, e RemoteEntry, queuedBy string) {
	name := e.Name
	fail := "fgr_r"
	if e.Ret != "" {
		fail = "0"
	}
	if e.Chunk == "" || queuedBy != "" {
		b.WriteString("    CUresult fgr_r;\n")
	}
	if e.UVA {
		stream := "NULL"
		if e.param("hStream") != nil {
			stream = "hStream"
		}
		fmt.Fprintf(b, "    if (fgr_uva_copy(&fgr_r, dst, src, ByteCount, %s, %d, %d))\n        return fgr_r;\n",
			stream, b2i(e.PerThread() != ""), b2i(e.Disp == DispQueue))
	}
	// A device address range freed: no longer the connection's.
	if d := e.Destroys; d != "" && e.param(d).Type == "CUdeviceptr" {
		fmt.Fprintf(b, "    fgr_range_drop((uint64_t)%s);\n", d)
	}
	// Pinned memory named as a device address is kept alike from then on
	// (for a copy with shortcuts, said before them).
	for _, p := range e.Params {
		if k := e.Dev[p.Name].Name; (k == "dev" || k == "base") && e.Stage == "" {
			fmt.Fprintf(b, "    fgr_mirror_named((uint64_t)(uintptr_t)%s);\n", p.Name)
		}
	}
	// What the protocol cannot carry is refused before anything is sent.
	for _, p := range e.Params {
		switch k := e.Kinds[p.Name]; k.Name {
		case "null":
			fmt.Fprintf(b, "    if (%s != NULL)\n        return fgr_unsupported(-1, \"%s\", \"%s\");\n", p.Name, name, p.Name)
		case "launchcfg":
			fmt.Fprintf(b, "    if ((fgr_r = fgr_launchcfg_check(%s, \"%s\")) != CUDA_SUCCESS)\n        return fgr_refused_here(\"%s\", fgr_r);\n", p.Name, name, name)
		case "in", "out", "inout":
			fmt.Fprintf(b, "    uint64_t n_%s = %s ? %s : 0;\n", p.Name, p.Name, bytesExpr(p, k))
			if k.Count != "" {
				fmt.Fprintf(b, "    if (n_%s > FGR_MAX_BUF)\n        return fgr_unsupported(-1, \"%s\", \"a buffer over the frame limit\");\n", p.Name, name)
			}
		case "jitopts", "libopts":
			fmt.Fprintf(b, "    if ((fgr_r = fgr_opts_check(%s, %s, %s, %s, \"%s\")) != CUDA_SUCCESS)\n        return fgr_refused_here(\"%s\", fgr_r);\n",
				optionKinds[k.Name], p.Name, e.paramAfter(p.Name).Name, k.Count, name, name)
		case "kparams":
			fmt.Fprintf(b, "    struct fgr_kparams fgr_kp;\n    if ((fgr_r = fgr_kparams_layout(f, %s, &fgr_kp)) != CUDA_SUCCESS)\n        return fgr_refused_here(\"%s\", fgr_r);\n", p.Name, name)
		case "extra":
			fmt.Fprintf(b, "    struct fgr_extra fgr_ex;\n    if ((fgr_r = fgr_extra_check(%s, kernelParams, &fgr_ex, \"%s\")) != CUDA_SUCCESS)\n        return fgr_refused_here(\"%s\", fgr_r);\n", p.Name, name, name)
		case "shadow":
			fmt.Fprintf(b, "    if (%s == NULL)\n        return CUDA_ERROR_INVALID_VALUE;\n", p.Name)
		}
	}
	b.WriteString("    struct fgr_call fgr_c;\n")
	queued := "0"
	if e.Disp == DispQueue {
		queued = "1"
	} else if queuedBy != "" {
		queued = queuedBy
	}
	fmt.Fprintf(b, "    if ((fgr_r = fgr_begin(&fgr_c, FGR_OP_%s, %s)) != CUDA_SUCCESS)\n        return %s;\n", name, queued, fail)
	for _, p := range e.Params {
		if _, ptr := e.Kinds[p.Name]; !ptr {
			fmt.Fprintf(b, "    fgr_put_u64(&fgr_c.w, %s);\n", bitsPut(p.Type, p.Name))
		}
	}
	for _, p := range e.Params {
		switch k := e.Kinds[p.Name]; k.Name {
		case "in", "inout":
			fmt.Fprintf(b, "    fgr_put_buf(&fgr_c.w, %s, n_%s);\n", p.Name, p.Name)
		case "out":
			fmt.Fprintf(b, "    fgr_put_u8(&fgr_c.w, %s != NULL);\n", p.Name)
		case "str":
			fmt.Fprintf(b, "    fgr_put_str(&fgr_c.w, %s);\n", p.Name)
		case "image":
			fmt.Fprintf(b, "    fgr_put_image(&fgr_c.w, %s);\n", p.Name)
		case "kparams":
			fmt.Fprintf(b, "    fgr_put_kparams(&fgr_c.w, &fgr_kp, %s);\n", p.Name)
		case "extra":
			b.WriteString("    fgr_put_extra(&fgr_c.w, &fgr_ex);\n")
		case "launchcfg":
			fmt.Fprintf(b, "    fgr_put_launchcfg(&fgr_c.w, %s);\n", p.Name)
		case "jitopts", "libopts":
			fmt.Fprintf(b, "    fgr_put_opts(&fgr_c.w, %s, %s, %s, %s);\n", optionKinds[k.Name], p.Name, e.paramAfter(p.Name).Name, k.Count)
		case "shadow":
			// The handle is ours to name: the server makes it when the call comes.
			fmt.Fprintf(b, "    *%s = (%s)(uintptr_t)fgr_shadow_new();\n    fgr_put_u64(&fgr_c.w, (uint64_t)(uintptr_t)*%s);\n", p.Name, pointee(p.Type), p.Name)
		}
	}
	if e.Disp == DispQueue && e.PinnedWait {
		sync := "cuStreamSynchronize(NULL)"
		if e.PerThread() != "" {
			sync = "cuStreamSynchronize_ptsz(NULL)"
		}
		fmt.Fprintf(b, "    if ((fgr_r = fgr_send(&fgr_c)) == CUDA_SUCCESS && fgr_pinned_host((uint64_t)dstDevice))\n        fgr_r = %s;\n    return fgr_r;\n}\n\n", sync)
		return
	}
	if e.Disp == DispQueue {
		b.WriteString("    return fgr_send(&fgr_c);\n}\n\n")
		return
	}
	if queuedBy != "" {
		fmt.Fprintf(b, "    if (%s)\n        return fgr_send(&fgr_c);\n", queuedBy)
	}
	// A call whose one result is a buffer of a given size: the answer's
	// bytes are read straight into it when large (fgr_roundtrip).
	var outs []Param
	for _, p := range e.Params {
		if k := e.Kinds[p.Name]; k.Name == "out" || k.Name == "inout" {
			outs = append(outs, p)
		}
	}
	if len(outs) == 1 && e.Kinds[outs[0].Name].Name == "out" && e.Kinds[outs[0].Name].Count != "" {
		fmt.Fprintf(b, "    fgr_c.direct = %s;\n    fgr_c.direct_n = n_%s;\n", outs[0].Name, outs[0].Name)
	}
	fmt.Fprintf(b, "    if ((fgr_r = fgr_roundtrip(&fgr_c)) != CUDA_SUCCESS)\n        return %s;\n", fail)
	if e.Ret != "" {
		// The driver's function answers a value, not a CUresult.
		b.WriteString("    uint64_t fgr_v = fgr_c.result == CUDA_SUCCESS ? fgr_get_u64(&fgr_c.r) : 0;\n")
		fmt.Fprintf(b, "    fgr_end(&fgr_c);\n    return %s;\n}\n\n", bitsGet(e.Ret, "fgr_v"))
		return
	}
	for _, p := range e.Params {
		switch k := e.Kinds[p.Name]; k.Name {
		case "inout":
			fmt.Fprintf(b, "    fgr_get_out(&fgr_c, %s, n_%s, 1);\n", p.Name, p.Name)
		case "out":
			fmt.Fprintf(b, "    fgr_get_out(&fgr_c, %s, n_%s, 0);\n", p.Name, p.Name)
		}
	}
	// Device memory of a known size the connection was given.
	var given []string
	for _, p := range e.Params {
		if size := e.Alloc[p.Name]; size != "" {
			given = append(given, fmt.Sprintf("        if (%s)\n            fgr_range_add((uint64_t)*%s, (uint64_t)(%s));\n", p.Name, p.Name, size))
		}
	}
	if len(given) == 0 {
		b.WriteString("    return fgr_end(&fgr_c);\n}\n\n")
		return
	}
	b.WriteString("    if ((fgr_r = fgr_end(&fgr_c)) == CUDA_SUCCESS) {\n")
	for _, g := range given {
		b.WriteString(g)
	}
	b.WriteString("    }\n    return fgr_r;\n}\n\n")
}

// emitClientTable writes a table's words, its functions and its fetch,
// which fills the words once per process: asking the driver for the table
// (and its data) when a word is forwarded or copied, locally otherwise.
func emitClientTable(b *strings.Builder, t *Table, unsupported *int) {
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
