// Package layout checks that the shim (C) and the control plane (Go) agree
// on every shared-memory region.
package layout

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
	"github.com/flexgv/flexgv/internal/trace"
)

type mirror struct {
	cName string
	goT   reflect.Type
}

type constant struct {
	c     string
	value uint64
}

// Compile a C program that prints every offset, size and constant from the
// generated header and compare them with the Go mirror, field by field.
func checkLayout(t *testing.T, header string, types []mirror, consts []constant) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	var src strings.Builder
	fmt.Fprintf(&src, "#include <stdio.h>\n#include <stddef.h>\n#include \"%s\"\nint main(void) {\n", header)
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
	for _, k := range consts {
		fmt.Fprintf(&src, "  printf(\"%s %%llu\\n\", (unsigned long long)%s);\n", k.c, k.c)
		want = append(want, fmt.Sprintf("%s %d", k.c, k.value))
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

func TestTraceRegionLayoutsAgree(t *testing.T) {
	checkLayout(t, "trace_layout_gen.h",
		[]mirror{{"fg_trace_header", reflect.TypeOf(trace.TraceHeader{})}, {"fg_trace_slot", reflect.TypeOf(trace.TraceSlot{})},
			{"fg_api_stat", reflect.TypeOf(trace.APIStat{})}},
		[]constant{{"FG_TRACE_MAGIC", trace.TraceMagic}, {"FG_TRACE_VERSION", trace.TraceVersion},
			{"FG_SLOT_RUNNING", trace.SlotRunning}, {"FG_SLOT_EXITED", trace.SlotExited}})
}

func TestTenantLayoutsAgree(t *testing.T) {
	checkLayout(t, "tenant_layout_gen.h",
		[]mirror{{"fg_tenant_device", reflect.TypeOf(tenant.Device{})}, {"fg_tenant_header", reflect.TypeOf(tenant.Header{})},
			{"fg_tenant_slot", reflect.TypeOf(tenant.Slot{})}},
		[]constant{{"FG_TENANT_MAGIC", tenant.TenantMagic}, {"FG_TENANT_VERSION", tenant.TenantVersion},
			{"FG_MAX_DEVICES", tenant.MaxDevices}, {"FG_TENANT_SLOT_FREE", tenant.SlotFree},
			{"FG_TENANT_SLOT_CLAIMED", tenant.SlotClaimed}, {"FG_TENANT_MEMBER_LOCK", tenant.MemberLock},
			{"FG_TENANT_MAX_SLOTS", tenant.MaxSlots}})
}

func TestSchedLayoutsAgree(t *testing.T) {
	checkLayout(t, "sched_layout_gen.h",
		[]mirror{{"fg_sched_tenant", reflect.TypeOf(sched.Tenant{})}, {"fg_sched_header", reflect.TypeOf(sched.Header{})},
			{"fg_sched_slot", reflect.TypeOf(sched.Slot{})}},
		[]constant{{"FG_SCHED_MAGIC", sched.SchedMagic}, {"FG_SCHED_VERSION", sched.SchedVersion},
			{"FG_SCHED_TENANTS", sched.MaxTenants}, {"FG_SCHED_SLOTS", sched.MaxSlots},
			{"FG_SCHED_WORDS", sched.MaskWords}, {"FG_SCHED_SLOT_FREE", sched.SlotFree}, {"FG_SCHED_SLOT_CLAIMED", sched.SlotClaimed},
			{"FG_SCHED_ADMIN_LOCK", sched.AdminLock}, {"FG_PRIORITY_LOW", sched.PriorityLow},
			{"FG_PRIORITY_NORMAL", sched.PriorityNormal}, {"FG_PRIORITY_HIGH", sched.PriorityHigh},
			{"FG_PRIORITY_MAX", sched.PriorityMax}})
}
