package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A remote program's NVML is the client's: it names the server's devices
// as the server's simulated GPU does, lists the program itself among the
// running processes where its executor holds memory, answers the calls it
// does not carry with NVML_ERROR_NOT_SUPPORTED said once, and leaves the
// program's own context current.
func TestRemoteNVML(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2")
	s := e.serve("unix")
	local := e.run("nvmlclient")
	devs := regexp.MustCompile(`device (\d+) name=(.*) uuid=(\S+) total=(\d+) `).FindAllStringSubmatch(local.stdout, -1)
	if local.code != 0 || len(devs) != 2 {
		t.Fatalf("the server's GPU locally: %+v", local)
	}
	r := e.remote(s, "nvmlremote", "ctx")
	if r.code != 0 || !strings.Contains(r.stdout, "\ndevices 2\n") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The kernel driver's version is the server's NVML's (the simulated one
	// ends in ".sim"): libraries parse it.
	if !regexp.MustCompile(`(?m)^driver \d+\.\d+\.sim nvml \d+\.\d+\.\d+\.sim cuda \d+$`).MatchString(r.stdout) {
		t.Errorf("the driver's version is not the server's:\n%s", r.stdout)
	}
	// Its running processes: itself alone, where it holds memory (its
	// context on device 0), with what its executor holds there.
	for _, d := range devs {
		i, name, uuid, total := d[1], d[2], d[3], d[4]
		procs := "procs=0"
		if i == "0" {
			procs = `procs=1 \(this program, holding memory\)`
		}
		want := regexp.MustCompile(fmt.Sprintf(`(?m)^device %s index=%s name=%s uuid=%s pci=[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0 `+
			`cc=\d+\.\d+ total=%s used=\d+ free=\d+ total_v2=%s %s byuuid=%s bypci=%s minor=Not Supported$`,
			i, i, regexp.QuoteMeta(name), uuid, total, total, procs, i, i))
		if !want.MatchString(r.stdout) {
			t.Errorf("device %s: want %s in\n%s", i, want, r.stdout)
		}
	}
	for _, want := range []string{
		"before init: Uninitialized\n",
		"utilization: Success gpu=0 memory=0\nutilization without a place for it: Invalid Argument\n" +
			// The server's readings, as its simulated GPU gives them idle.
			"readings: temperature Success 30 (the old call Success 30), power Success 60000, limit Success 700000, " +
			"clock 0 Success 345 max Success 1500, clock 1 Success 345 max Success 1500, clock 2 Success 2600 max Success 2600, " +
			"clock 3 Success 765 max Success 1200, fan Not Supported, pstate Success 0\n" +
			"readings refused: sensor Invalid Argument, version Argument version mismatch, clock Invalid Argument, no place Invalid Argument Invalid Argument\n" +
			"board id: Not Supported\n" +
			"p2p read 0-0: Success status 0\np2p read 0-1: Success status 5\np2p without a place for it: Invalid Argument\nunknown uuid: Not Found\n",
		"after one shutdown: Success\nafter two: Uninitialized\na third: Uninitialized\n",
		"own context still current\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q in\n%s", want, r.stdout)
		}
	}
	for _, name := range []string{"nvmlDeviceGetBoardId"} {
		if n := strings.Count(r.stderr, "flexgv remote: "+name+" is not supported remotely (NVML_ERROR_NOT_SUPPORTED)\n"); n != 1 {
			t.Errorf("%s said %d times:\n%s", name, n, r.stderr)
		}
	}
	// Utilization is the server's GPU's, as its NVML measures it: busy with
	// another process's kernels, it shows.
	busy := e.spinnerUnder(nil, "1000", "2", "16")
	busy.start()
	time.Sleep(500 * time.Millisecond)
	during := e.remote(s, "nvmlremote")
	busy.result()
	m := regexp.MustCompile(`utilization: Success gpu=(\d+) `).FindStringSubmatch(during.stdout)
	if m == nil || m[1] == "0" {
		t.Errorf("the server's GPU busy: %q\n%s", m, during.stdout)
	}
	// The library alone, without flexgv run or the shim, says the same.
	withShim := e.remote(s, "nvmlremote")
	e.extra = append(e.extra, "FLEXGV_REMOTE="+s.addr)
	alone := e.runIn(filepath.Join(build, "remote"), "nvmlremote")
	// (the GPU's utilization aside, and the readings that follow it: they
	// change from one moment to the next)
	util := regexp.MustCompile(`(?m)gpu=\d+|^readings: .*$`)
	if alone.code != 0 || withShim.code != 0 || util.ReplaceAllString(alone.stdout, "") != util.ReplaceAllString(withShim.stdout, "") {
		t.Errorf("alone: exit %d\n%s%s\nunder flexgv run: exit %d\n%s", alone.code, alone.stdout, alone.stderr,
			withShim.code, withShim.stdout)
	}
	// A tool built on go-nvml (flexgv node) lists the server's GPUs.
	node := e.runIn("", "flexgv", "run", "--remote", s.addr, "--", bin("flexgv"), "node")
	if node.code != 0 || !strings.Contains(node.stdout, devs[0][3]) || !strings.Contains(node.stdout, devs[1][3]) {
		t.Errorf("flexgv node remotely: exit %d\n%s%s", node.code, node.stdout, node.stderr)
	}
}

// A remote tenant's NVML shows its quota as its CUDA calls do: the memory
// a program with one context sees.
func TestRemoteTenantNVML(t *testing.T) {
	e := quotaEnv(t)
	tok := e.token("a")
	s := e.serve("unix", "--tenant", "a:"+tok, "--mem", "256MiB", "--ctx-mem", "64MiB")
	info := e.remoteAs(s, tok, "memclient", "info")
	var free, total uint64
	if _, err := fmt.Sscanf(info.stdout, "free %d total %d", &free, &total); err != nil || total != 256*mib {
		t.Fatalf("memclient info remotely: %+v", info)
	}
	r := e.remoteAs(s, tok, "nvmlremote")
	want := fmt.Sprintf(" total=%d used=%d free=%d total_v2=%d ", total, total-free, free, total)
	if r.code != 0 || !strings.Contains(r.stdout, "device 0 ") || !strings.Contains(r.stdout, want) {
		t.Fatalf("want %q in\nexit %d\n%s%s", want, r.code, r.stdout, r.stderr)
	}
}
