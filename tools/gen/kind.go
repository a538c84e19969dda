package main

import (
	"fmt"
	"sort"
	"strings"
)

// Kind is how one parameter of a forwarded call travels, and all that the
// generator writes for it. A pointer parameter is given its kind in
// api/remote.api as PARAM=KIND or PARAM=KIND[COUNT]; a device address
// (dev, base, any) is given one too; any other by-value parameter takes
// its kind from its type (value, handle). The kinds, each in its own
// kind_*.go:
//
//	value                      a by-value word           kind_value.go
//	handle                     a by-value handle         kind_value.go
//	dev base any, alloc[SIZE]  device memory             kind_addr.go
//	in out inout [COUNT]       buffers                   kind_buf.go
//	str image null             read-only data            kind_data.go
//	kparams extra launchcfg    a launch's parameters     kind_launch.go
//	jitopts libopts optvalues  option arrays             kind_opts.go
//	shadow                     a handle the client names kind_shadow.go
//
// The generator calls each method once per parameter of that kind, in
// parameter order within each step; by-value parameters travel before the
// pointers (their sizes may use them). A client stub: remember, refuse,
// (fgr_begin) put, (round trip) get, kept. An executor operation: decode,
// (frame read whole) ready, checks, alloc, (the driver's call) record,
// name, unname, reply. Each side's put and decode, get and reply must agree on the bytes
// (kind_test.go checks they do).
type Kind interface {
	// annotate records PARAM=KIND[COUNT] on e, refusing what the kind cannot
	// carry in itself; validate then checks it against the whole entry.
	annotate(e *RemoteEntry, p *Param, ann Ann) error
	validate(a arg) error

	// The client. remember: what it keeps of an argument before the call
	// is sent (or cut into pieces); refuse: what the protocol cannot carry,
	// turned down before anything is sent; put: the request's bytes;
	// get: the answer's; kept: what it keeps of a successful answer.
	remember(w *cw, a arg)
	refuse(w *cw, a arg)
	put(w *cw, a arg)
	get(w *cw, a arg)
	kept(w *cw, a arg)
	// answers: the answer carries the parameter back; direct: it may be
	// read straight into the caller's memory when the only one.
	answers(a arg) bool
	direct(a arg) bool

	// The executor. decode: the request's bytes to the driver's argument;
	// ready: what is set once the whole frame is read; checks: what must
	// hold before the driver is called; alloc: the result's memory, once
	// the checks passed; record: what a successful call changes in the
	// connection's tables; reply: the answer's bytes.
	decode(w *cw, a arg)
	ready(w *cw, a arg)
	checks(a arg) []check
	alloc(w *cw, a arg)
	record(w *cw, a arg)
	// name: the client's names for the handles a successful call
	// returned; unname: the names put back, after the call, where the
	// executor had put the driver's handles.
	name(w *cw, a arg)
	unname(w *cw, a arg)
	reply(w *cw, a arg)
	// big: a request with it may be as long as FGR_MAX_FRAME (else its
	// part is bounded far below FGR_SMALL_FRAME).
	big(a arg) bool

	// doc says in docs/REMOTE-SUPPORT.md how the parameter travels and
	// which memory it names ("" for nothing to say).
	doc(a arg) (travel, memory string)
}

// Ann is an annotation: a kind's name and its count (a C expression: the
// number of pointed-to objects; a size in bytes; "" for none).
type Ann struct {
	Name  string
	Count string
}

// arg is one parameter of an entry with its annotation and kind.
type arg struct {
	e   *RemoteEntry
	p   Param
	ann Ann
	k   Kind
}

// size is the C expression for the bytes a buffer parameter points to.
func (a arg) size() string { return bytesExpr(a.p, a.ann) }

// ptr says the parameter travels as what it points to.
func (a arg) ptr() bool {
	_, ok := a.e.Kinds[a.p.Name]
	return ok
}

// kinds are the kinds api/remote.api names.
var kinds = map[string]Kind{}

// kindNames lists them, for messages.
func kindNames() string {
	var s []string
	for n := range kinds {
		s = append(s, n)
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// args are e's parameters, each with its kind.
func (e *RemoteEntry) args() []arg {
	var out []arg
	for _, p := range e.Params {
		a := arg{e: e, p: p}
		if ann, ok := e.Kinds[p.Name]; ok {
			a.ann, a.k = ann, kinds[ann.Name]
			if _, ok := e.Alloc[p.Name]; ok {
				a.k = kinds["alloc"]
			}
		} else if ann, ok := e.Dev[p.Name]; ok {
			a.ann, a.k = ann, kinds[ann.Name]
		} else if remoteHandles[p.Type] {
			a.k = handleKind{}
		} else {
			a.k = valueKind{}
		}
		out = append(out, a)
	}
	return out
}

// none is a kind that writes nothing: the kinds embed it and write only
// the steps they take part in.
type none struct{}

func (none) annotate(_ *RemoteEntry, p *Param, _ Ann) error {
	return fmt.Errorf("%s takes its kind from its type", p.Name)
}
func (none) validate(arg) error       { return nil }
func (none) remember(*cw, arg)        {}
func (none) refuse(*cw, arg)          {}
func (none) put(*cw, arg)             {}
func (none) get(*cw, arg)             {}
func (none) kept(*cw, arg)            {}
func (none) answers(arg) bool         { return false }
func (none) direct(arg) bool          { return false }
func (none) decode(*cw, arg)          {}
func (none) ready(*cw, arg)           {}
func (none) checks(arg) []check       { return nil }
func (none) alloc(*cw, arg)           {}
func (none) record(*cw, arg)          {}
func (none) name(*cw, arg)            {}
func (none) unname(*cw, arg)          {}
func (none) reply(*cw, arg)           {}
func (none) big(arg) bool             { return false }
func (none) doc(arg) (string, string) { return "", "" }

// pointer is a kind of pointer parameter: what it points to travels.
type pointer struct {
	none
	counted bool // takes a [COUNT]
}

func (k pointer) annotate(e *RemoteEntry, p *Param, ann Ann) error {
	if ann.Count != "" && !k.counted {
		return fmt.Errorf("only in, out, inout and option arrays take a count")
	}
	if !strings.HasSuffix(p.Type, "*") {
		return fmt.Errorf("%s is passed by value and needs no kind", p.Name)
	}
	e.Kinds[p.Name] = ann
	return nil
}

func (pointer) doc(a arg) (string, string) {
	s := a.p.Name + ": " + a.ann.Name
	if a.ann.Count != "" {
		s += "[" + a.ann.Count + "]"
	}
	return "`" + strings.ReplaceAll(s, "|", "\\|") + "`", ""
}

// owner is the handle that owns what a call returns, as fgr_add's last
// two arguments: the Owner parameter's handle, else the request's
// context; none for a device-wide kind of handle.
func (e *RemoteEntry) owner(kind string) string {
	if e.Owner == "none" || deviceWide[kind] {
		return "0, 0"
	}
	if e.Owner != "" {
		p := e.param(e.Owner)
		return fmt.Sprintf("FGR_H_%s, %s", p.Type, handleVal(p.Type, e.Owner))
	}
	return "FGR_H_CUcontext, fgr_ctx"
}

// structChecks are the checks of the handles in a structure of type t.
func structChecks(a arg, t string) []check {
	var cs []check
	for _, f := range structHandles[t] {
		v := fmt.Sprintf("(%s ? %s : 0)", a.p.Name, handleVal(f[1], a.p.Name+"->"+f[0]))
		cs = append(cs, check{fmt.Sprintf("fgr_has(FGR_H_%s, %s)", f[1], v), a.p.Name + "->" + f[0], v, "CUDA_ERROR_INVALID_HANDLE", false})
	}
	for _, c := range append(structConds[t], structConds[a.e.Name+" "+t]...) {
		cs = append(cs, check{fmt.Sprintf("!%s || (%s)", a.p.Name, structField(a, c.cond)), a.p.Name + "->" + c.field,
			fmt.Sprintf("(%s ? %s : 0)", a.p.Name, structField(a, c.val)), c.err, false})
	}
	return cs
}

// structField is expr with $ read as the parameter's structure's fields, @
// as the parameter.
func structField(a arg, expr string) string {
	return strings.ReplaceAll(strings.ReplaceAll(expr, "$", a.p.Name+"->"), "@", a.p.Name)
}
