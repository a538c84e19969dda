package main

import (
	"fmt"
	"strings"
)

// cw writes C a line at a time, each indented four spaces a block deep:
// the remote generator's one way of writing C statements.
type cw struct {
	strings.Builder
	depth int
}

// cf formats a piece of C (a condition, an expression) for a line.
func cf(format string, a ...any) string { return fmt.Sprintf(format, a...) }

// line writes one line at the current depth.
func (w *cw) line(format string, a ...any) {
	w.WriteString(strings.Repeat("    ", w.depth))
	fmt.Fprintf(&w.Builder, format, a...)
	w.WriteByte('\n')
}

// blank writes an empty line.
func (w *cw) blank() { w.WriteByte('\n') }

// ifThen writes "if (cond)" and its one statement a level deeper.
func (w *cw) ifThen(cond, stmt string) { w.line("if (%s)", cond); w.in(stmt) }

// elseIf continues an ifThen.
func (w *cw) elseIf(cond, stmt string) { w.line("else if (%s)", cond); w.in(stmt) }

// in writes one statement a level deeper than the current one.
func (w *cw) in(stmt string) {
	w.depth++
	w.line("%s", stmt)
	w.depth--
}

// cont is what continues a condition on the next line, below its start.
func (w *cw) cont() string { return "\n" + strings.Repeat("    ", w.depth+1) }

// open writes head and the opening brace of its block, which it enters.
func (w *cw) open(head string) {
	if head == "" {
		w.line("{")
	} else {
		w.line("%s {", head)
	}
	w.depth++
}

// fn writes a function's declaration and enters its body.
func (w *cw) fn(decl string) {
	w.line("%s", decl)
	w.open("")
}

// close leaves a block; closeWith ends it with tail, as ";" ends an
// initializer.
func (w *cw) close() { w.closeWith("") }

func (w *cw) closeWith(tail string) {
	w.depth--
	w.line("}%s", tail)
}

// add writes the lines of s, written by sub.
func (w *cw) add(s *cw) { w.WriteString(s.String()) }

// sub is an empty writer at the depth of w, levels deeper, for lines whose
// presence decides what goes around them.
func (w *cw) sub(levels int) *cw { return &cw{depth: w.depth + levels} }
