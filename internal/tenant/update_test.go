package tenant

import (
	"strings"
	"testing"
)

// A live tenant's shares, caps and priority change in its file; its memory
// quotas and devices do not.
func TestSetCompute(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(dir, Spec{Name: "g", Devices: oneGiB, Priority: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	devs := []DeviceQuota{{UUID: uuidA, Quota: 1 << 30, ComputeShare: 4000, ComputeMax: 5000}, {UUID: uuidB, ComputeMax: 2500}}
	if err := SetCompute(dir, "g", devs, 7, 40); err != nil {
		t.Fatal(err)
	}
	info, err := Read(a.Path)
	want := []DeviceUse{{Index: 0, UUID: uuidA, Quota: 1 << 30, Share: 4000, ComputeMax: 5000}, {Index: 1, UUID: uuidB, ComputeMax: 2500}}
	if err != nil || info.Priority != 7 || info.SM != 40 || len(info.Devices) != 2 || info.Devices[0] != want[0] || info.Devices[1] != want[1] {
		t.Fatalf("after SetCompute: %+v %v", info, err)
	}
	// Runs joining with the new values are the same tenant.
	b, err := Acquire(dir, Spec{Name: "g", Devices: devs, Priority: 7, SM: 40})
	if err != nil {
		t.Fatalf("joining with the new values: %v", err)
	}
	b.Release()

	for _, c := range []struct {
		name string
		devs []DeviceQuota
		msg  string
	}{
		{"g", []DeviceQuota{{UUID: uuidA, Quota: 2 << 30}, {UUID: uuidB}}, "tenant g: its devices or memory quotas are not the ones given (it has 0=1GiB"},
		{"g", devs[:1], "its devices or memory quotas are not the ones given"},
		{"nope", devs, "no tenant nope"},
		{"a/b", devs, `tenant name "a/b"`},
	} {
		if err := SetCompute(dir, c.name, c.devs, 4, 0); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("SetCompute(%s, %+v): %v, want %q", c.name, c.devs, err, c.msg)
		}
	}
	if info, _ := Read(a.Path); info.Priority != 7 || info.Devices[0].Share != 4000 {
		t.Errorf("a refused change changed the file: %+v", info)
	}
}

// The suspended mark goes on the live process named by either of its
// pids, and on no dead one.
func TestSetSuspended(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(dir, Spec{Name: "g", Devices: oneGiB})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	writeSlot(t, a.Path, 0, Slot{State: SlotClaimed, Pid: 11, NvmlPid: 5011, Used: [MaxDevices]uint64{7}})
	writeSlot(t, a.Path, 1, Slot{State: SlotClaimed, Pid: 12, Used: [MaxDevices]uint64{7}}) // dead: not locked
	defer lockSlot(t, a.Path, 0).Close()
	if err := SetSuspended(dir, "g", 5011, true); err != nil {
		t.Fatal(err)
	}
	if info, err := Read(a.Path); err != nil || len(info.Procs) != 1 || !info.Procs[0].Suspended || info.Procs[0].NvmlPid != 5011 {
		t.Fatalf("after marking 5011: %+v %v", info, err)
	}
	if err := SetSuspended(dir, "g", 11, false); err != nil {
		t.Fatal(err)
	}
	if info, _ := Read(a.Path); info.Procs[0].Suspended {
		t.Errorf("after unmarking 11: %+v", info)
	}
	for _, c := range []struct {
		name string
		pid  int
		msg  string
	}{
		{"g", 12, "tenant g has no live process 12"},
		{"nope", 11, "no tenant nope"},
	} {
		if err := SetSuspended(dir, c.name, c.pid, true); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("SetSuspended(%s, %d): %v, want %q", c.name, c.pid, err, c.msg)
		}
	}
}
