package daemon

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/flexgv/flexgv/internal/tenant"
)

var oneGiB = []tenant.DeviceQuota{{UUID: uuid0, Quota: 1 << 30}}

// A daemon that dies (its member locks dropped, nothing released) leaves
// its tenants to their runs; the next one re-adopts those still there,
// creates again with the same quotas those that went with their last run,
// and holds them after their runs leave. A name that now belongs to a
// tenant someone else made is not taken over.
func TestReadoptAfterADaemonDies(t *testing.T) {
	dir := t.TempDir()
	first, _, _, err := adopt(dir)
	if err != nil {
		t.Fatal(err)
	}
	var runs []*tenant.Tenant
	for _, name := range []string{"kept", "gone", "replaced"} {
		if _, _, err := first.create(tenant.Spec{Name: name, Devices: oneGiB}, nil); err != nil {
			t.Fatal(err)
		}
		run, err := tenant.Acquire(dir, tenant.Spec{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	// Its runs hold them: releasing is what the daemon's death does.
	first.releaseAll()
	runs[1].Release()
	runs[2].Release()
	if _, err := os.Stat(filepath.Join(dir, "tenant-gone")); !os.IsNotExist(err) {
		t.Fatalf("a tenant no member holds: %v", err)
	}
	other, err := tenant.Acquire(dir, tenant.Spec{Name: "replaced", Devices: oneGiB})
	if err != nil || !other.Created {
		t.Fatalf("a new tenant of the same name: %+v %v", other, err)
	}
	defer other.Release()

	second, adopted, _, err := adopt(dir)
	if err != nil || strings.Join(adopted, ",") != "gone,kept" {
		t.Fatalf("re-adopted %v (%v), want gone,kept", adopted, err)
	}
	defer second.releaseAll()
	runs[0].Release()
	for _, name := range []string{"kept", "gone"} {
		info, err := tenant.Read(filepath.Join(dir, "tenant-"+name))
		if err != nil || len(info.Devices) != 1 || info.Devices[0].Quota != 1<<30 {
			t.Fatalf("%s held by the second daemon: %+v %v", name, info, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, registryName))
	if err != nil || strings.Count(string(data), `"name"`) != 2 || strings.Contains(string(data), `"replaced"`) {
		t.Fatalf("registry %s %v", data, err)
	}
}

// Anyone may put files in the state folder: a registry this user did not
// write, or cannot read, stops the daemon with a clear message.
func TestRegistryRefusals(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, registryName)
	if err := os.WriteFile(p, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := adopt(dir); err == nil || !strings.Contains(err.Error(), "is damaged; remove it") {
		t.Fatalf("damaged registry: %v", err)
	}
	os.Remove(p)
	if err := os.Symlink("/etc/passwd", p); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := adopt(dir); err == nil {
		t.Fatal("a registry that is a symbolic link was read")
	}
	if os.Geteuid() == 0 {
		os.Remove(p)
		if err := os.WriteFile(p, []byte("[]"), 0o600); err != nil || os.Chown(p, 65534, 65534) != nil {
			t.Fatal(err)
		}
		if _, _, _, err := adopt(dir); err == nil || !strings.Contains(err.Error(), "not a registry this user wrote (owner uid 65534)") {
			t.Fatalf("another user's registry: %v", err)
		}
	}
}

// One daemon per state folder.
func TestOneDaemonPerStateFolder(t *testing.T) {
	dir := t.TempDir()
	f, err := lockState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockState(dir); err != errBusy {
		t.Fatalf("second lock: %v", err)
	}
	f.Close()
	g, err := lockState(dir)
	if err != nil {
		t.Fatalf("lock after the first daemon is gone: %v", err)
	}
	g.Close()
}

// heldByChild, set in a run of the test binary, makes that run a daemon
// holding tenant "starting" in the folder it names until it is killed.
const heldByChild = "FLEXGV_TEST_HELD_BY_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(heldByChild); dir != "" {
		h, _, _, err := adopt(dir)
		if err == nil {
			_, _, err = h.create(tenant.Spec{Name: "starting", Devices: oneGiB}, nil)
		}
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("held")
		// Until killed: nothing it holds is released.
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM)
		<-stop
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// A daemon killed (nothing released, nothing swept) leaves its tenant with
// no member while a process of it may be starting, its file mapped and no
// slot claimed yet: the next daemon takes the same file back, not a new one
// made in its place, which would cost that process its tenant.
func TestReadoptKeepsTheFileOfAStartingProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), heldByChild+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if line != "held\n" {
		t.Fatalf("the first daemon: %q", line)
	}
	file := filepath.Join(dir, "tenant-starting")
	mapped, err := os.Open(file) // what the starting process has, holding no lock
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	before, err := mapped.Stat()
	if err != nil {
		t.Fatal(err)
	}
	second, adopted, _, err := adopt(dir)
	if err != nil || strings.Join(adopted, ",") != "starting" {
		t.Fatalf("re-adopted %v (%v), want starting", adopted, err)
	}
	defer second.releaseAll()
	after, err := os.Stat(file)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("tenant file of the starting process made again in its place (%v): it would find its tenant removed", err)
	}
}
