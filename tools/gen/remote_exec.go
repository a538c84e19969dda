package main

import (
	"fmt"
	"strings"
)

// emitRemoteServer writes the executor's decoders and dispatch table.
func emitRemoteServer(entries []RemoteEntry, tables []*Table) string {
	var b strings.Builder
	b.WriteString(remoteHeader)
	b.WriteString("#include \"executor.h\"\n\n")
	for _, e := range entries {
		if e.Forwarded() && !e.Fetch {
			ret := e.Ret
			if ret == "" {
				ret = "CUresult"
			}
			fmt.Fprintf(&b, "typedef %s (*pfn_%s)(%s);\n", ret, e.Name, e.ParamList())
		}
	}
	b.WriteString("\n")
	for _, e := range entries {
		if !e.Forwarded() {
			continue
		}
		fmt.Fprintf(&b, "static CUresult op_%s(struct fgr_rd *rd, struct fgr_req *q)\n{\n    (void)q;\n", e.Name)
		if e.Fetch {
			// The table's data words, read where the driver's table points.
			fmt.Fprintf(&b, "    const void *const *fgr_t = fgr_real[FGR_OP_%s];\n    (void)fgr_t;\n", e.Name)
			b.WriteString("    if (!fgr_rd_done(rd))\n        return FGR_BAD_FRAME;\n")
			for _, sl := range e.Table.Slots {
				if sl.Kind == "data" {
					fmt.Fprintf(&b, "    fgr_reply_out(q, fgr_t[%d], %d, 0, CUDA_SUCCESS);\n", sl.Index, sl.N)
				}
			}
			b.WriteString("    return CUDA_SUCCESS;\n}\n\n")
			continue
		}
		// By-value parameters first, then pointers: sizes may use the former.
		for _, p := range e.Params {
			if _, ptr := e.Kinds[p.Name]; !ptr {
				get := "fgr_get_u64(rd)"
				if shadowed[p.Type] {
					get = fmt.Sprintf("fgr_unshadow(FGR_H_%s, fgr_get_u64(rd))", p.Type)
				}
				fmt.Fprintf(&b, "    %s = %s;\n", joinDecl(p.Type, p.Name), bitsGet(p.Type, get))
			}
		}
		for _, z := range e.Zero {
			fmt.Fprintf(&b, "    %s = 0; /* of unknown use: as the driver was seen given it */\n", z)
		}
		for _, p := range e.Params {
			k, ptr := e.Kinds[p.Name]
			if !ptr {
				continue
			}
			t := pointee(p.Type)
			switch k.Name {
			case "in", "inout":
				fmt.Fprintf(&b, "    %s *%s = fgr_get_buf(rd, q, %s, %d);\n", t, p.Name, bytesExpr(p, k), b2i(!byteBuffer(p.Type)))
				for _, f := range structHandles[t] {
					if shadowed[f[1]] { // our copy: the driver is given its own handle
						fmt.Fprintf(&b, "    if (%s)\n        %s->%s = (%s)(uintptr_t)fgr_unshadow(FGR_H_%s, (uint64_t)(uintptr_t)%s->%s);\n",
							p.Name, p.Name, f[0], f[1], f[1], p.Name, f[0])
					}
				}
			case "shadow":
				fmt.Fprintf(&b, "    uint64_t fgr_id_%s = fgr_get_u64(rd);\n", p.Name)
			case "out":
				fmt.Fprintf(&b, "    int has_%s = fgr_get_u8(rd);\n", p.Name)
			case "str":
				fmt.Fprintf(&b, "    char *%s = fgr_get_str(rd);\n", p.Name)
			case "image":
				fmt.Fprintf(&b, "    void *%s = fgr_get_image(rd, q);\n", p.Name)
			case "kparams":
				fmt.Fprintf(&b, "    void **%s = fgr_get_kparams(rd, q);\n", p.Name)
			case "extra":
				fmt.Fprintf(&b, "    void **%s = fgr_get_extra(rd, q);\n", p.Name)
			case "launchcfg":
				fmt.Fprintf(&b, "    CUlaunchConfig *%s = fgr_get_launchcfg(rd, q);\n", p.Name)
			case "jitopts", "libopts":
				v := e.paramAfter(p.Name).Name
				fmt.Fprintf(&b, "    void **%s = NULL;\n    %s *%s = fgr_get_opts(rd, q, %s, &%s, &%s);\n", v, pointee(p.Type), p.Name, optionKinds[k.Name], v, k.Count)
			case "null":
				fmt.Fprintf(&b, "    %s = NULL;\n", joinDecl(p.Type, p.Name))
			}
		}
		b.WriteString("    if (!fgr_rd_done(rd))\n        return FGR_BAD_FRAME;\n")
		for _, p := range e.Params {
			if k := e.Kinds[p.Name]; k.Name == "shadow" {
				fmt.Fprintf(&b, "    if (!fgr_is_shadow(fgr_id_%s))\n        return FGR_BAD_FRAME;\n", p.Name)
				fmt.Fprintf(&b, "    %s fgr_v_%s = NULL, *%s = &fgr_v_%s;\n", pointee(p.Type), p.Name, p.Name, p.Name)
			}
			if k := e.Kinds[p.Name]; k.Name == "out" {
				fmt.Fprintf(&b, "    %s *%s = NULL;\n", pointee(p.Type), p.Name)
			}
		}
		// Results get memory only once the checks passed: a refused call
		// allocates (and pins) nothing.
		var outs strings.Builder
		for _, p := range e.Params {
			if k := e.Kinds[p.Name]; k.Name == "out" {
				fmt.Fprintf(&outs, "    if (fgr_r == CUDA_SUCCESS && has_%s && !(%s = fgr_out(q, %s)))\n        return fgr_out_failed(q);\n", p.Name, p.Name, bytesExpr(p, k))
			}
		}
		call := fmt.Sprintf("((pfn_%s)fgr_real[FGR_OP_%s])(%s)", e.Name, e.Name, e.ArgList())
		if e.Ret != "" {
			if outs.Len() > 0 {
				fmt.Fprintf(&b, "    CUresult fgr_r = CUDA_SUCCESS;\n%s", outs.String())
			}
			fmt.Fprintf(&b, "    fgr_put_u64(q->reply, %s);\n    return CUDA_SUCCESS;\n}\n\n", bitsPut(e.Ret, call))
			continue
		}
		checks := serverChecks(e)
		var before []string
		if w := waitArgs(e); w != "" {
			before = append(before, "(fgr_r = fgr_wait("+w+")) == FGR_GO")
		}
		if c := captureArgs(e); c != "" {
			before = append(before, "(fgr_r = "+c+") == CUDA_SUCCESS")
		}
		b.WriteString("    CUresult fgr_r = CUDA_SUCCESS;\n")
		for i, c := range checks {
			if i > 0 {
				b.WriteString("    else ")
			} else {
				b.WriteString("    ")
			}
			refuse := "fgr_refuse"
			if c.size {
				refuse = "fgr_refuse_size"
			}
			fmt.Fprintf(&b, "if (!(%s))\n        fgr_r = %s(\"%s\", \"%s\", %s, %s);\n", c.cond, refuse, e.Name, c.what, c.val, c.err)
		}
		b.WriteString(outs.String())
		before = append([]string{"fgr_r == CUDA_SUCCESS"}, before...)
		fmt.Fprintf(&b, "    if (%s)\n        fgr_r = %s;\n", strings.Join(before, " &&\n        "), call)
		if rec := serverRecords(e); rec != "" {
			fmt.Fprintf(&b, "    if (fgr_r == CUDA_SUCCESS) {\n%s    }\n", rec)
		}
		if e.Drain != "" {
			fmt.Fprintf(&b, "    if (fgr_r == CUDA_SUCCESS)\n        fgr_r = fgr_drain(%s, %d);\n", e.Drain, b2i(e.PerThread() != ""))
		}
		for _, p := range e.Params {
			switch k := e.Kinds[p.Name]; k.Name {
			case "inout":
				fmt.Fprintf(&b, "    fgr_reply_out(q, %s, %s, 1, fgr_r);\n", p.Name, bytesExpr(p, k))
			case "out":
				fmt.Fprintf(&b, "    if (has_%s)\n        fgr_reply_out(q, %s, %s, 0, fgr_r);\n", p.Name, p.Name, bytesExpr(p, k))
			}
		}
		b.WriteString("    return fgr_r;\n}\n\n")
	}
	b.WriteString("const struct fgr_op_desc fgr_ops[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() {
			fmt.Fprintf(&b, "    [FGR_OP_%s] = {\"%s\", op_%s, %d, %s},\n", e.Name, e.Name, e.Name, b2i(e.Sync), maxFrame(e))
		}
	}
	b.WriteString("};\n\n/* The export tables the client answers: the functions it forwards. */\n")
	b.WriteString("const struct fgr_xtable fgr_xtables[] = {\n")
	forwarded := 0
	for _, t := range tables {
		if t.Local() {
			continue
		}
		forwarded++
		b.WriteString("    {{{")
		for i, c := range t.UUID {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d", c)
		}
		fmt.Fprintf(&b, "}}, FGR_OP_xt_%s, {", t.Name)
		for _, sl := range t.Slots {
			if sl.Fn != nil {
				fmt.Fprintf(&b, "{FGR_OP_%s, %d}, ", sl.Fn.Name, sl.Index)
			}
		}
		b.WriteString("{0, 0}}},\n")
	}
	fmt.Fprintf(&b, "};\n\nconst int fgr_nxtables = %d;\n", forwarded)
	return b.String()
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
// FGR_MAX_FRAME when it sends a buffer of a size it chooses or a module
// image, else FGR_SMALL_FRAME (its by-value words, single objects, strings,
// kernel parameters, options and launch attributes are each bounded far
// below it). The executor refuses a longer frame before reading it.
func maxFrame(e RemoteEntry) string {
	for _, k := range e.Kinds {
		if k.Name == "image" || ((k.Name == "in" || k.Name == "inout") && k.Count != "") {
			return "FGR_MAX_FRAME"
		}
	}
	return "FGR_SMALL_FRAME"
}

// serverChecks are the conditions a request must meet before the driver
// sees it: every handle it names is this connection's, every device
// address lies in this connection's memory.
func serverChecks(e RemoteEntry) []check {
	var cs []check

	for _, p := range e.Params {
		_, ptr := e.Kinds[p.Name]
		switch {
		case !ptr && remoteHandles[p.Type]:
			v := handleVal(p.Type, p.Name)
			bad := "CUDA_ERROR_INVALID_HANDLE"
			if p.Type == "CUcontext" { // as the driver answers for a destroyed context
				bad = "CUDA_ERROR_INVALID_CONTEXT"
			}
			cs = append(cs, check{fmt.Sprintf("fgr_has(FGR_H_%s, %s)", p.Type, v), p.Name, v, bad, false})
		case !ptr && (p.Type == "CUdeviceptr" || e.Dev[p.Name].Name == "dev"):
			v := "(uint64_t)(uintptr_t)" + p.Name
			switch k := e.Dev[p.Name]; k.Name {
			case "dev":
				cs = append(cs, check{fmt.Sprintf("fgr_mem_in(%s, %s)", v, k.Count), p.Name, v, "CUDA_ERROR_INVALID_VALUE", false})
			case "base":
				cs = append(cs, check{fmt.Sprintf("fgr_mem_base(%s)", v), p.Name, v, "CUDA_ERROR_INVALID_VALUE", false})
			}
		case ptr:
			k := e.Kinds[p.Name]
			t := pointee(p.Type)
			// A result other than a download's bytes is small: a size the
			// client chose is refused before anything is allocated.
			if k.Name == "out" && k.Count != "" && e.Stage != p.Name {
				n := bytesExpr(p, k)
				cs = append(cs, check{fmt.Sprintf("!has_%s || %s <= FGR_SMALL_FRAME", p.Name, n), p.Name, n, "CUDA_ERROR_INVALID_VALUE", true})
			}
			if (k.Name == "in" || k.Name == "inout") && remoteHandles[t] {
				cs = append(cs, check{fmt.Sprintf("fgr_has_n(FGR_H_%s, %s, %s / sizeof(%s))", t, p.Name, bytesExpr(p, k), t), p.Name, "(uint64_t)0", "CUDA_ERROR_INVALID_HANDLE", false})
			}
			if k.Name == "launchcfg" {
				t = "CUlaunchConfig"
			}
			if k.Name == "in" || k.Name == "inout" || k.Name == "launchcfg" {
				for _, f := range structHandles[t] {
					v := fmt.Sprintf("(%s ? %s : 0)", p.Name, handleVal(f[1], p.Name+"->"+f[0]))
					cs = append(cs, check{fmt.Sprintf("fgr_has(FGR_H_%s, %s)", f[1], v), p.Name + "->" + f[0], v, "CUDA_ERROR_INVALID_HANDLE", false})
				}
			}
			if k.Name == "launchcfg" { // events named by its attributes
				cs = append(cs, check{fmt.Sprintf("fgr_launchcfg_events_ok(%s)", p.Name), p.Name + "->attrs", "(uint64_t)0", "CUDA_ERROR_INVALID_HANDLE", false})
			}
		}
	}
	return cs
}

// serverRecords is what a successful call changes in the connection's
// tables: what it destroyed is forgotten, with all it owned; the handles
// and memory it returned are the connection's, owned by the Owner
// parameter's handle, else by the request's context.
func serverRecords(e RemoteEntry) string {
	var b strings.Builder
	if d := e.Destroys; d != "" {
		p := e.param(d)
		if p.Type == "CUdeviceptr" {
			fmt.Fprintf(&b, "        fgr_drop(FGR_H_MEM, (uint64_t)%s);\n", d)
		} else {
			fmt.Fprintf(&b, "        fgr_drop(FGR_H_%s, %s);\n", p.Type, handleVal(p.Type, d))
		}
	}
	owner := func(kind string) string {
		if e.Owner == "none" || deviceWide[kind] {
			return "0, 0"
		}
		if e.Owner != "" {
			p := e.param(e.Owner)
			return fmt.Sprintf("FGR_H_%s, %s", p.Type, handleVal(p.Type, e.Owner))
		}
		return "FGR_H_CUcontext, fgr_ctx"
	}
	for _, p := range e.Params {
		k, ok := e.Kinds[p.Name]
		if ok && k.Name == "shadow" {
			t := pointee(p.Type)
			fmt.Fprintf(&b, "        fgr_add(FGR_H_%s, %s, %s);\n        fgr_shadow_add(FGR_H_%s, fgr_id_%s, %s);\n",
				t, handleVal(t, "*"+p.Name), owner(t), t, p.Name, handleVal(t, "*"+p.Name))
			continue
		}
		if !ok || k.Name != "out" {
			continue
		}
		t := pointee(p.Type)
		if size, ok := e.Alloc[p.Name]; ok {
			if size == "" {
				fmt.Fprintf(&b, "        if (%s)\n            fgr_mem_add_found(*%s, %s);\n", p.Name, p.Name, owner(""))
			} else {
				fmt.Fprintf(&b, "        if (%s)\n            fgr_mem_add(*%s, %s, %s);\n", p.Name, p.Name, size, owner(""))
			}
			continue
		}
		if !remoteHandles[t] {
			continue
		}
		if k.Count == "" {
			fmt.Fprintf(&b, "        if (%s)\n            fgr_add(FGR_H_%s, %s, %s);\n", p.Name, t, handleVal(t, "*"+p.Name), owner(t))
		} else {
			fmt.Fprintf(&b, "        for (uint64_t fgr_i = 0; %s && fgr_i < %s / sizeof(%s); fgr_i++)\n            fgr_add(FGR_H_%s, %s, %s);\n",
				p.Name, bytesExpr(p, k), t, t, handleVal(t, p.Name+"[fgr_i]"), owner(t))
		}
	}
	return b.String()
}
