package main

// strKind is str: a NUL-terminated string, NULL kept apart from "".
type strKind struct{ pointer }

func (strKind) put(w *cw, a arg)    { w.line("fgr_put_str(&fgr_c.w, %s);", a.p.Name) }
func (strKind) decode(w *cw, a arg) { w.line("char *%s = fgr_get_str(rd);", a.p.Name) }

// imageKind is image: a module image (cubin, fatbin or PTX) of the length
// its format says, which the client works out (remote/wire.h).
type imageKind struct{ pointer }

func (imageKind) put(w *cw, a arg)    { w.line("fgr_put_image(&fgr_c.w, %s);", a.p.Name) }
func (imageKind) decode(w *cw, a arg) { w.line("void *%s = fgr_get_image(rd, q);", a.p.Name) }
func (imageKind) big(arg) bool        { return true }

// nullKind is null: a pointer the protocol carries only as NULL; the
// client refuses any other value, the executor passes NULL.
type nullKind struct{ pointer }

func (nullKind) refuse(w *cw, a arg) {
	w.ifThen(a.p.Name+" != NULL", cf("return fgr_unsupported(-1, \"%s\", \"%s\");", a.e.Name, a.p.Name))
}

func (nullKind) decode(w *cw, a arg) { w.line("%s = NULL;", joinDecl(a.p.Type, a.p.Name)) }

func init() {
	kinds["str"] = strKind{}
	kinds["image"] = imageKind{}
	kinds["null"] = nullKind{}
}
