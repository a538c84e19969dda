package trace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The shim (C) and the CLI (Go) must agree on every offset and size of the
// trace region. Compile a C program that prints them from the generated
// header and compare with the Go structs field by field.
func TestCAndGoLayoutsAgree(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	types := []struct {
		cName string
		goT   reflect.Type
	}{
		{"fg_trace_header", reflect.TypeOf(TraceHeader{})},
		{"fg_trace_slot", reflect.TypeOf(TraceSlot{})},
		{"fg_api_stat", reflect.TypeOf(APIStat{})},
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"trace_layout_gen.h\"\nint main(void) {\n")
	var want []string
	for _, ty := range types {
		fmt.Fprintf(&src, "  printf(\"%s size %%zu\\n\", sizeof(struct %s));\n", ty.cName, ty.cName)
		want = append(want, fmt.Sprintf("%s size %d", ty.cName, ty.goT.Size()))
		for i := 0; i < ty.goT.NumField(); i++ {
			f := ty.goT.Field(i)
			c := f.Tag.Get("c")
			if c == "" {
				t.Fatalf("%s.%s has no c tag", ty.goT.Name(), f.Name)
			}
			fmt.Fprintf(&src, "  printf(\"%s.%s %%zu %%zu\\n\", offsetof(struct %s, %s), sizeof(((struct %s *)0)->%s));\n",
				ty.cName, c, ty.cName, c, ty.cName, c)
			want = append(want, fmt.Sprintf("%s.%s %d %d", ty.cName, c, f.Offset, f.Type.Size()))
		}
	}
	for _, k := range []struct {
		c   string
		go_ uint64
	}{{"FG_TRACE_MAGIC", TraceMagic}, {"FG_TRACE_VERSION", TraceVersion}, {"FG_SLOT_RUNNING", SlotRunning}, {"FG_SLOT_EXITED", SlotExited}} {
		fmt.Fprintf(&src, "  printf(\"%s %%llu\\n\", (unsigned long long)%s);\n", k.c, k.c)
		want = append(want, fmt.Sprintf("%s %d", k.c, k.go_))
	}
	src.WriteString("  return 0;\n}\n")
	dir := t.TempDir()
	cfile := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "layout")
	inc, _ := filepath.Abs(filepath.Join("..", "..", "include", "flexgv"))
	if out, err := exec.Command(cc, "-I", inc, "-o", bin, cfile).CombinedOutput(); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("C and Go layouts differ:\nC:  %q\nGo: %q", got, want)
	}
}

func TestOpenRejectsForeignFiles(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, make([]byte, 4096), 0o644)
	if _, err := Open(junk); err == nil || !strings.Contains(err.Error(), "not a trace region") {
		t.Fatalf("Open(junk) = %v, want a 'not a trace region' error", err)
	}
	r, err := Create(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Remove()
	o, err := Open(r.Path)
	if err != nil {
		t.Fatalf("Open of a fresh region: %v", err)
	}
	s := o.Summarize()
	o.Close()
	if len(s.Processes) != 0 || len(s.APIs) != 0 {
		t.Fatalf("fresh region summarized as %+v", s)
	}
	if _, err := Create(dir, 1); err == nil {
		t.Fatal("Create with one slot succeeded")
	}
}
