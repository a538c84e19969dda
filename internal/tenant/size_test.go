package tenant

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"1024": 1024, "1B": 1, "4KiB": 4096, "1.5MiB": 1572864, "8GiB": 8 << 30, "2KB": 2000, "3MB": 3e6, "1GB": 1e9, " 2 GiB ": 2 << 30,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "1XB", "GiB", "1e400GiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

func TestParseMem(t *testing.T) {
	totals := []uint64{16 << 30, 8 << 30}
	for _, c := range []struct {
		spec string
		want []uint64
	}{
		{"8GiB", []uint64{8 << 30, 8 << 30}},
		{"25%", []uint64{4 << 30, 2 << 30}},
		{"0=8GiB,1=50%", []uint64{8 << 30, 4 << 30}},
		{"1=1GiB", []uint64{0, 1 << 30}},
	} {
		got, err := ParseMem(c.spec, totals, MaxDevices)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseMem(%q) = %v, %v; want %v", c.spec, got, err, c.want)
		}
	}
	for _, c := range []struct{ spec, msg string }{
		{"0", "zero bytes"},
		{"0B", "zero bytes"},
		{"lots", "not a size"},
		{"10GiB", "more than device 1 has (8GiB)"},
		{"2=1GiB", "no device 2"},
		{"0=1GiB,0=2GiB", "given twice"},
		{"150%", "not a percentage"},
		{"0%", "not a percentage"},
		{"x=1GiB", "not DEVICE=SIZE"},
		{"1GiB,2GiB", "DEVICE=SIZE"},
	} {
		if _, err := ParseMem(c.spec, totals, MaxDevices); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseMem(%q) = %v; want an error with %q", c.spec, err, c.msg)
		}
	}
	// Without NVML: sizes apply, percentages cannot.
	if q, err := ParseMem("1GiB", nil, 4); err != nil || len(q) != 4 {
		t.Errorf("ParseMem without totals = %v, %v", q, err)
	}
	if _, err := ParseMem("50%", nil, 4); err == nil || !strings.Contains(err.Error(), "NVML") {
		t.Errorf("ParseMem(50%%) without totals = %v", err)
	}
}

func TestAcquireCreatesJoinsAndRefuses(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(dir, Spec{Name: "g", Quota: []uint64{1 << 30}})
	if err != nil || !a.Created {
		t.Fatalf("create: %+v %v", a, err)
	}
	if b, err := Acquire(dir, Spec{Name: "g"}); err != nil || b.Created || b.Path != a.Path {
		t.Fatalf("join without quota: %+v %v", b, err)
	}
	if _, err := Acquire(dir, Spec{Name: "g", Quota: []uint64{2 << 30}}); err == nil || !strings.Contains(err.Error(), "already exists with quota 0=1GiB") {
		t.Fatalf("join with another quota: %v", err)
	}
	if _, err := Acquire(dir, Spec{Name: "nope"}); err == nil || !strings.Contains(err.Error(), "give --mem to create it") {
		t.Fatalf("join a missing group: %v", err)
	}
	if _, err := Acquire(dir, Spec{Name: "bad/name", Quota: []uint64{1}}); err == nil {
		t.Fatal("a name with a slash was accepted")
	}
	info, err := Read(a.Path)
	if err != nil || info.Name != "g" || info.Quota[0] != 1<<30 || len(info.Procs) != 0 {
		t.Fatalf("read: %+v %v", info, err)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if infos, _ := List(dir); len(infos) != 0 {
		t.Fatalf("released tenant still listed: %+v", infos)
	}
}
