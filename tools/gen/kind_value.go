package main

import "fmt"

// word is a by-value parameter: one u64 on the wire, the bits of its
// value (a float's or double's as such).
type word struct{ none }

func (word) put(w *cw, a arg) { w.line("fgr_put_u64(&fgr_c.w, %s);", bitsPut(a.p.Type, a.p.Name)) }

func (word) decode(w *cw, a arg) {
	w.line("%s = %s;", joinDecl(a.p.Type, a.p.Name), bitsGet(a.p.Type, "fgr_get_u64(rd)"))
}

// valueKind is a by-value parameter the executor hands on as it came: a
// number, a flag, an enumeration.
type valueKind struct{ word }

// handleKind is a by-value handle of a kind the executor tracks
// (remoteHandles): the client sends the name it was given, which the
// executor turns back into the driver's handle (fgr_in); it must be one
// this connection was given.
type handleKind struct{ word }

func (handleKind) decode(w *cw, a arg) {
	get := fmt.Sprintf("fgr_in(FGR_H_%s, fgr_get_u64(rd))", a.p.Type)
	w.line("%s = %s;", joinDecl(a.p.Type, a.p.Name), bitsGet(a.p.Type, get))
}

func (handleKind) checks(a arg) []check {
	v := handleVal(a.p.Type, a.p.Name)
	bad := "CUDA_ERROR_INVALID_HANDLE"
	if a.p.Type == "CUcontext" { // as the driver answers for a destroyed context
		bad = "CUDA_ERROR_INVALID_CONTEXT"
	}
	return []check{{fmt.Sprintf("fgr_has(FGR_H_%s, %s)", a.p.Type, v), a.p.Name, v, bad, false}}
}
