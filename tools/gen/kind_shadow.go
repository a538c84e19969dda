package main

import "fmt"

// shadowKind is shadow: an out handle of a kind the executor maps
// (shadowed) that the client names itself, so that the creating call is
// queued: it picks the value (fgr_shadow_new: FGR_SHADOW_TAG in its top
// bits) and sends it; the executor checks it is a shadow value and maps it
// to the handle the driver made, wherever a later request carries it.
type shadowKind struct{ pointer }

func (k shadowKind) annotate(e *RemoteEntry, p *Param, ann Ann) error {
	if !shadowed[pointee(p.Type)] || ann.Count != "" {
		return fmt.Errorf("shadow is for an out handle of a kind the executor maps (%s is %s)", p.Name, p.Type)
	}
	return k.pointer.annotate(e, p, ann)
}

func (shadowKind) validate(a arg) error {
	if a.e.Disp != DispQueue {
		return fmt.Errorf("%s=shadow makes no round trip: the call must be queued", a.p.Name)
	}
	return nil
}

func (shadowKind) refuse(w *cw, a arg) {
	w.ifThen(a.p.Name+" == NULL", "return CUDA_ERROR_INVALID_VALUE;")
}

// The handle is ours to name: the server makes it when the call comes.
func (shadowKind) put(w *cw, a arg) {
	w.line("*%s = (%s)(uintptr_t)fgr_shadow_new();", a.p.Name, pointee(a.p.Type))
	w.line("fgr_put_u64(&fgr_c.w, (uint64_t)(uintptr_t)*%s);", a.p.Name)
}

func (shadowKind) decode(w *cw, a arg) { w.line("uint64_t fgr_id_%s = fgr_get_u64(rd);", a.p.Name) }

func (shadowKind) ready(w *cw, a arg) {
	w.ifThen(cf("!fgr_is_shadow(fgr_id_%s)", a.p.Name), "return FGR_BAD_FRAME;")
	w.line("%s fgr_v_%s = NULL, *%s = &fgr_v_%s;", pointee(a.p.Type), a.p.Name, a.p.Name, a.p.Name)
}

func (shadowKind) record(w *cw, a arg) {
	t := pointee(a.p.Type)
	w.line("fgr_add(FGR_H_%s, %s, %s);", t, handleVal(t, "*"+a.p.Name), a.e.owner(t))
	w.line("fgr_shadow_add(FGR_H_%s, fgr_id_%s, %s);", t, a.p.Name, handleVal(t, "*"+a.p.Name))
}

func init() { kinds["shadow"] = shadowKind{} }
