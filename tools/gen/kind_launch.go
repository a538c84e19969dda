package main

import "fmt"

// kparamsKind is kparams: a kernel's parameters (void **), which the
// client lays out by the function f's parameter sizes
// (fgr_kparams_layout, refusing a function it cannot lay out) and sends
// as one block; the executor points the driver's array into it.
type kparamsKind struct{ pointer }

func (kparamsKind) validate(a arg) error {
	if a.e.param("f") == nil {
		return fmt.Errorf("kparams needs a function parameter f")
	}
	return nil
}

func (kparamsKind) refuse(w *cw, a arg) {
	w.line("struct fgr_kparams fgr_kp;")
	w.ifThen(cf("(fgr_r = fgr_kparams_layout(f, %s, &fgr_kp)) != CUDA_SUCCESS", a.p.Name), cf("return fgr_refused_here(\"%s\", fgr_r);", a.e.Name))
}

func (kparamsKind) put(w *cw, a arg)    { w.line("fgr_put_kparams(&fgr_c.w, &fgr_kp, %s);", a.p.Name) }
func (kparamsKind) decode(w *cw, a arg) { w.line("void **%s = fgr_get_kparams(rd, q);", a.p.Name) }

// extraKind is extra: a launch's extra array, of which the client takes
// the argument buffer form only (fgr_extra_check), the executor rebuilding
// the array around the bytes.
type extraKind struct{ pointer }

func (extraKind) validate(a arg) error {
	if a.e.param("kernelParams") == nil {
		return fmt.Errorf("extra= goes with a kernelParams parameter")
	}
	return nil
}

func (extraKind) refuse(w *cw, a arg) {
	w.line("struct fgr_extra fgr_ex;")
	w.ifThen(cf("(fgr_r = fgr_extra_check(%s, kernelParams, &fgr_ex, \"%s\")) != CUDA_SUCCESS", a.p.Name, a.e.Name), cf("return fgr_refused_here(\"%s\", fgr_r);", a.e.Name))
}

func (extraKind) put(w *cw, a arg)    { w.line("fgr_put_extra(&fgr_c.w, &fgr_ex);") }
func (extraKind) decode(w *cw, a arg) { w.line("void **%s = fgr_get_extra(rd, q);", a.p.Name) }

// launchcfgKind is launchcfg: a CUlaunchConfig with its attributes, of
// which the client takes those it knows (fgr_launchcfg_check); its stream,
// and the events its attributes name, must be the connection's.
type launchcfgKind struct{ pointer }

func (launchcfgKind) refuse(w *cw, a arg) {
	w.ifThen(cf("(fgr_r = fgr_launchcfg_check(%s, \"%s\")) != CUDA_SUCCESS", a.p.Name, a.e.Name), cf("return fgr_refused_here(\"%s\", fgr_r);", a.e.Name))
}

func (launchcfgKind) put(w *cw, a arg) { w.line("fgr_put_launchcfg(&fgr_c.w, %s);", a.p.Name) }
func (launchcfgKind) decode(w *cw, a arg) {
	w.line("CUlaunchConfig *%s = fgr_get_launchcfg(rd, q);", a.p.Name)
}

func (launchcfgKind) checks(a arg) []check {
	return append(structChecks(a, "CUlaunchConfig"),
		check{fmt.Sprintf("fgr_launchcfg_events_ok(%s)", a.p.Name), a.p.Name + "->attrs", "(uint64_t)0", "CUDA_ERROR_INVALID_HANDLE", false})
}

func init() {
	kinds["kparams"] = kparamsKind{}
	kinds["extra"] = extraKind{}
	kinds["launchcfg"] = launchcfgKind{}
}
