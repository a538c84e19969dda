package main

import (
	"fmt"
	"strings"
)

// optsKind is an option array, jitopts[COUNT], linkopts[COUNT] (a link
// state's: its logs read after the calls that write them),
// linkdataopts[COUNT] (a link input's: its logs kept back) or
// libopts[COUNT], COUNT the
// by-value count, its values the next parameter (optvalues). Only options
// whose value is the word itself travel (remote/options.h): the client
// refuses others (fgr_opts_check); the executor sets the values and the
// count to what it decoded.
type optsKind struct {
	pointer
	set string // the options' table in remote/options.h
}

func (k optsKind) annotate(e *RemoteEntry, p *Param, ann Ann) error {
	next := e.paramAfter(p.Name)
	if c := e.param(ann.Count); ann.Count == "" || c == nil || strings.HasSuffix(c.Type, "*") || next == nil {
		return fmt.Errorf("%s[COUNT] needs a by-value count and its values as the next parameter", ann.Name)
	}
	return k.pointer.annotate(e, p, ann)
}

func (optsKind) validate(a arg) error {
	if a.e.Kinds[a.e.paramAfter(a.p.Name).Name].Name != "optvalues" {
		return fmt.Errorf("the values of %s need optvalues", a.p.Name)
	}
	return nil
}

func (k optsKind) refuse(w *cw, a arg) {
	w.ifThen(cf("(fgr_r = fgr_opts_check(%s, %s, %s, %s, \"%s\")) != CUDA_SUCCESS", k.set, a.p.Name, a.e.paramAfter(a.p.Name).Name, a.ann.Count, a.e.Name),
		cf("return fgr_refused_here(\"%s\", fgr_r);", a.e.Name))
}

func (k optsKind) put(w *cw, a arg) {
	w.line("fgr_put_opts(&fgr_c.w, %s, %s, %s, %s);", k.set, a.p.Name, a.e.paramAfter(a.p.Name).Name, a.ann.Count)
}

// A module load's logs come back (remote/options.h): the answer carries
// them after the outputs before them.
func (k optsKind) answers(arg) bool { return k.set == "FGR_OPTS_JIT" }

func (k optsKind) get(w *cw, a arg) {
	if k.set == "FGR_OPTS_JIT" {
		w.line("fgr_get_opts_logs(&fgr_c, %s, %s, %s, %s);", k.set, a.p.Name, a.e.paramAfter(a.p.Name).Name, a.ann.Count)
	}
}

func (k optsKind) reply(w *cw, a arg) {
	if k.set == "FGR_OPTS_JIT" {
		w.line("fgr_reply_opts_logs(q, %s, %s, %s, %s);", k.set, a.p.Name, a.e.paramAfter(a.p.Name).Name, a.ann.Count)
	}
}

func (k optsKind) decode(w *cw, a arg) {
	v := a.e.paramAfter(a.p.Name).Name
	w.line("void **%s = NULL;", v)
	w.line("%s *%s = fgr_get_opts(rd, q, %s, &%s, &%s);", pointee(a.p.Type), a.p.Name, k.set, v, a.ann.Count)
}

// optvaluesKind is optvalues: the values of the option array before it,
// which carries them.
type optvaluesKind struct{ pointer }

func (optvaluesKind) validate(a arg) error {
	if b := a.e.paramBefore(a.p.Name); b == nil || !isOpts(a.e.Kinds[b.Name]) {
		return fmt.Errorf("%s=optvalues must follow an option array", a.p.Name)
	}
	return nil
}

func isOpts(ann Ann) bool {
	_, ok := kinds[ann.Name].(optsKind)
	return ok
}

func init() {
	kinds["jitopts"] = optsKind{pointer{counted: true}, "FGR_OPTS_JIT"}
	kinds["libopts"] = optsKind{pointer{counted: true}, "FGR_OPTS_LIBRARY"}
	kinds["linkopts"] = optsKind{pointer{counted: true}, "FGR_OPTS_LINK"}
	kinds["linkdataopts"] = optsKind{pointer{counted: true}, "FGR_OPTS_LINKDATA"}
	kinds["optvalues"] = optvaluesKind{}
}
