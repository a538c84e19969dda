package daemon

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// policies are the tenants a GPU's scheduler has, as name=share/cap/priority.
func policies(t *testing.T, dir, uuid string) string {
	t.Helper()
	g, err := sched.Read(dir, uuid)
	if err != nil {
		t.Fatal(err)
	}
	if g == nil {
		return ""
	}
	var out []string
	for _, x := range g.Tenants {
		out = append(out, x.Name+"="+sched.Percent(x.Policy.Share)+"/"+sched.Percent(x.Policy.Cap)+"/"+sched.PriorityName(x.Policy.Priority))
	}
	return strings.Join(out, " ")
}

func update(a *api, name, compute, computeMax, prio string) (*flexgvv1.UpdateTenantResponse, error) {
	return a.UpdateTenant(context.Background(), &flexgvv1.UpdateTenantRequest{Name: name, Compute: compute, ComputeMax: computeMax, Priority: prio})
}

func createCompute(a *api, name, compute, prio string) (*flexgvv1.CreateTenantResponse, error) {
	return a.CreateTenant(context.Background(), &flexgvv1.CreateTenantRequest{Name: name, Compute: compute, Priority: prio, ContextBytes: 512 << 20})
}

// A tenant the daemon holds is a member of the scheduler of each GPU where
// it has a policy, so its share holds with none of its runs there; an
// update changes the schedulers (what running processes follow), the file
// (what later ones and flexgv ps read) and the registry.
func TestHeldTenantsAreScheduledAndUpdatedLive(t *testing.T) {
	dir := t.TempDir()
	a := newTestAPI(t, dir, fakeNVML(twoGPUs, nil))
	if _, err := createCompute(a, "g", "0=30%", ""); err != nil {
		t.Fatal(err)
	}
	if got := policies(t, dir, uuid0); got != "g=30%/0%/normal" {
		t.Fatalf("GPU 0's scheduler: %q", got)
	}
	if got := policies(t, dir, uuid1); got != "" {
		t.Fatalf("GPU 1's scheduler, where g has no policy: %q", got)
	}

	r, err := update(a, "g", "0=50%,"+uuid1+"=20%", "1=60%", "high")
	if err != nil {
		t.Fatal(err)
	}
	d := r.Tenant.Devices
	if r.Tenant.Priority != sched.PriorityHigh || d[0].ComputeShare != 5000 || d[1].ComputeShare != 2000 || d[1].ComputeMax != 6000 {
		t.Fatalf("updated tenant: %+v", r.Tenant)
	}
	if got := policies(t, dir, uuid0); got != "g=50%/0%/high" {
		t.Errorf("GPU 0's scheduler after the update: %q", got)
	}
	if got := policies(t, dir, uuid1); got != "g=20%/60%/high" {
		t.Errorf("GPU 1's scheduler after the update: %q", got)
	}
	info, err := tenant.Read(tenant.Path(dir, "g"))
	if err != nil || info.Priority != sched.PriorityHigh || info.Devices[0].Share != 5000 || info.Devices[1].ComputeMax != 6000 {
		t.Errorf("the tenant file: %+v %v", info, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, registryName)); err != nil ||
		!strings.Contains(string(data), `"ComputeShare":5000`) || !strings.Contains(string(data), `"priority":7`) {
		t.Errorf("registry: %s %v", data, err)
	}

	// Devices not named keep theirs; "none" removes; a GPU where nothing
	// is asked any more is left.
	if _, err := update(a, "g", "1=none", "1=none", "normal"); err != nil {
		t.Fatal(err)
	}
	if got := policies(t, dir, uuid0); got != "g=50%/0%/normal" {
		t.Errorf("GPU 0's scheduler: %q", got)
	}
	if got := policies(t, dir, uuid1); got != "" {
		t.Errorf("GPU 1's scheduler, where g asks nothing now: %q", got)
	}
	if _, err := update(a, "g", "none", "", ""); err != nil {
		t.Fatal(err)
	}
	if got := policies(t, dir, uuid0); got != "" {
		t.Errorf("GPU 0's scheduler with g's share removed: %q", got)
	}
}

func TestUpdateRefusals(t *testing.T) {
	dir := t.TempDir()
	a := newTestAPI(t, dir, fakeNVML(twoGPUs, nil))
	if _, err := createCompute(a, "g", "0=30%", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := createCompute(a, "other", "0=40%,1=90%", "low"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, compute, computeMax, prio string
		code                            codes.Code
		msg                             string
	}{
		{"g", "", "", "", codes.InvalidArgument, "compute, compute_max, priority and sm are empty; give what to change (memory quotas cannot change while a tenant lives: each process's shim reads them once, at its start)"},
		{"a/b", "10%", "", "", codes.InvalidArgument, `tenant name "a/b"`},
		{"nope", "10%", "", "", codes.NotFound, "no tenant nope"},
		{"g", "0=120%", "", "", codes.InvalidArgument, `compute 0=120%: "120%" is not a percentage above 0 and at most 100`},
		{"g", "0=10%,2=10%", "", "", codes.InvalidArgument, "compute 0=10%,2=10%: there is no device 2 (2 devices)"},
		{"g", "0=10%,0=20%", "", "", codes.InvalidArgument, "compute 0=10%,0=20%: device 0 is given twice"},
		{"g", "0=10%,junk", "", "", codes.InvalidArgument, `compute 0=10%,junk: "junk" is not DEVICE=PCT`},
		{"g", "", "0=20%", "", codes.InvalidArgument, "device 0: a share of 30% is above its cap of 20%"},
		{"g", "", "", "urgent", codes.InvalidArgument, `--priority "urgent": use low, normal, high or a number from 0 to 9`},
		{"g", "0=70%", "", "", codes.FailedPrecondition, "device 0 (" + uuid0 + "): shares would add up to 110% (other 40%, and g asks 70%); the most is 100%"},
		{"g", "20%", "", "", codes.FailedPrecondition, "device 1 (" + uuid1 + "): shares would add up to 110% (other 90%, and g asks 20%)"},
	} {
		_, err := update(a, c.name, c.compute, c.computeMax, c.prio)
		wantCode(t, err, c.code, c.msg)
	}
	// Joining a GPU is refused alike, and leaves no tenant.
	_, err := createCompute(a, "third", "0=50%", "")
	wantCode(t, err, codes.FailedPrecondition, "shares would add up to 120% (g 30%, other 40%, and third asks 50%)")
	if _, err := os.Stat(tenant.Path(dir, "third")); !os.IsNotExist(err) {
		t.Errorf("a refused tenant's file: %v", err)
	}
	// Nothing refused changed anything.
	if got := policies(t, dir, uuid0); got != "g=30%/0%/normal other=40%/0%/low" {
		t.Errorf("GPU 0's scheduler: %q", got)
	}
	if info, _ := tenant.Read(tenant.Path(dir, "g")); info.Devices[0].Share != 3000 || info.Devices[0].ComputeMax != 0 || info.Priority != sched.PriorityNormal {
		t.Errorf("g after the refusals: %+v", info)
	}

	noNVML := newTestAPI(t, t.TempDir(), fakeNVML(nil, errors.New("no NVML")))
	_, err = update(noNVML, "g", "10%", "", "")
	wantCode(t, err, codes.FailedPrecondition, "need NVML to identify the GPUs")
}

// A group its runs made without the daemon is updated all the same: the
// scheduler its runs joined, and its file; the daemon does not hold it.
func TestUpdateOfATenantNotHeld(t *testing.T) {
	dir := t.TempDir()
	a := newTestAPI(t, dir, fakeNVML(twoGPUs, nil))
	run, err := tenant.Acquire(dir, tenant.Spec{Name: "r", Devices: []tenant.DeviceQuota{{UUID: uuid0, ComputeShare: 2000}, {UUID: uuid1}}, Priority: sched.PriorityNormal})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Release()
	m, err := sched.Join(dir, uuid0, "r", sched.Policy{Share: 2000, Priority: sched.PriorityNormal})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r, err := update(a, "r", "", "0=25%", "low")
	if err != nil || r.Tenant.Held || r.Tenant.Devices[0].ComputeMax != 2500 {
		t.Fatalf("update: %+v %v", r, err)
	}
	if got := policies(t, dir, uuid0); got != "r=20%/25%/low" {
		t.Errorf("GPU 0's scheduler: %q", got)
	}
	if got := policies(t, dir, uuid1); got != "" {
		t.Errorf("GPU 1's scheduler, where no run of r is: %q", got)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, registryName)); strings.Contains(string(data), `"r"`) {
		t.Errorf("a tenant the daemon does not hold is in its registry: %s", data)
	}
}

// A daemon that dies takes its scheduler memberships with it; the next one
// re-adopts its tenants with the policies they last had, the file's where
// it is still there, the registry's where it went with its last run.
func TestReadoptionKeepsPolicies(t *testing.T) {
	dir := t.TempDir()
	first, _, _, err := adopt(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(dir, first, fakeNVML(twoGPUs, nil), io.Discard)
	for _, name := range []string{"kept", "gone"} {
		if _, err := a.CreateTenant(context.Background(), &flexgvv1.CreateTenantRequest{Name: name, Compute: "0=20%", ContextBytes: 512 << 20}); err != nil {
			t.Fatal(err)
		}
		if _, err := update(a, name, "", "1=50%", "high"); err != nil {
			t.Fatal(err)
		}
	}
	run, err := tenant.Acquire(dir, tenant.Spec{Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Release()
	first.releaseAll() // what the daemon's death does: "gone" goes
	if got := policies(t, dir, uuid0); got != "" {
		t.Fatalf("GPU 0's scheduler with the daemon dead: %q", got)
	}
	if _, err := os.Stat(tenant.Path(dir, "gone")); !os.IsNotExist(err) {
		t.Fatalf("a tenant no member holds: %v", err)
	}

	second, adopted, problems, err := adopt(dir)
	if err != nil || strings.Join(adopted, ",") != "gone,kept" || problems != nil {
		t.Fatalf("re-adopted %v (%v %v)", adopted, problems, err)
	}
	defer second.releaseAll()
	if got := policies(t, dir, uuid0); got != "kept=20%/0%/high gone=20%/0%/high" {
		t.Errorf("GPU 0's scheduler after the restart: %q", got)
	}
	if got := policies(t, dir, uuid1); got != "kept=0%/50%/high gone=0%/50%/high" {
		t.Errorf("GPU 1's scheduler after the restart: %q", got)
	}
}

// A GPU that refuses the update (its region counts a share no tenant file
// shows) leaves every GPU as it was, and the file.
func TestUpdateRefusedByAGPUChangesNothing(t *testing.T) {
	dir := t.TempDir()
	a := newTestAPI(t, dir, fakeNVML(twoGPUs, nil))
	if _, err := createCompute(a, "g", "0=30%,1=10%", ""); err != nil {
		t.Fatal(err)
	}
	ghost, err := sched.Join(dir, uuid1, "ghost", sched.Policy{Share: 8000, Priority: sched.PriorityNormal})
	if err != nil {
		t.Fatal(err)
	}
	defer ghost.Close()
	_, err = update(a, "g", "0=50%,1=30%", "", "high")
	wantCode(t, err, codes.FailedPrecondition, "GPU "+uuid1+": shares would add up to 110%")
	if got := policies(t, dir, uuid0); got != "g=30%/0%/normal" {
		t.Errorf("GPU 0's scheduler after the refusal: %q", got)
	}
	if got := policies(t, dir, uuid1); got != "g=10%/0%/normal ghost=80%/0%/normal" {
		t.Errorf("GPU 1's scheduler after the refusal: %q", got)
	}
	if info, _ := tenant.Read(tenant.Path(dir, "g")); info.Devices[0].Share != 3000 || info.Priority != sched.PriorityNormal {
		t.Errorf("g's file after the refusal: %+v", info)
	}
}

// A share taken by another tenant while no daemon ran is not taken back:
// the group is re-adopted without its place in that GPU's scheduler, and
// the daemon says so.
func TestReadoptionWhereTheShareWasTaken(t *testing.T) {
	dir := t.TempDir()
	first, _, _, err := adopt(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := createCompute(newAPI(dir, first, fakeNVML(twoGPUs, nil), io.Discard), "g", "0=60%", ""); err != nil {
		t.Fatal(err)
	}
	first.releaseAll()
	other, err := sched.Join(dir, uuid0, "other", sched.Policy{Share: 5000, Priority: sched.PriorityNormal})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	second, adopted, problems, err := adopt(dir)
	if err != nil || strings.Join(adopted, ",") != "g" || len(problems) != 1 ||
		!strings.Contains(problems[0].Error(), "tenant g: GPU "+uuid0+": shares would add up to 110% (other 50%, and g asks 60%)") {
		t.Fatalf("re-adopted %v: %v %v", adopted, problems, err)
	}
	defer second.releaseAll()
	if got := policies(t, dir, uuid0); got != "other=50%/0%/normal" {
		t.Errorf("GPU 0's scheduler: %q", got)
	}
}
