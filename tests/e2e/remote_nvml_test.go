package e2e

import (
	"context"
	"fmt"
	"os/exec"
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

// A remote tenant's NVML shows its quota as its CUDA calls do: a program
// with one context sees that context's memory held, and a query with none
// (nvidia-smi) none.
func TestRemoteTenantNVML(t *testing.T) {
	e := quotaEnv(t)
	tok := e.token("a")
	s := e.serve("unix", "--tenant", "a:"+tok, "--mem", "256MiB", "--ctx-mem", "64MiB")
	info := e.remoteAs(s, tok, "memclient", "info")
	var free, total uint64
	if _, err := fmt.Sscanf(info.stdout, "free %d total %d", &free, &total); err != nil || total != 256*mib {
		t.Fatalf("memclient info remotely: %+v", info)
	}
	r := e.remoteAs(s, tok, "nvmlremote", "ctx")
	want := fmt.Sprintf(" total=%d used=%d free=%d total_v2=%d ", total, total-free, free, total)
	if r.code != 0 || !strings.Contains(r.stdout, "device 0 ") || !strings.Contains(r.stdout, want) {
		t.Fatalf("want %q in\nexit %d\n%s%s", want, r.code, r.stdout, r.stderr)
	}
	// nvidia-smi, which people and scripts ask, shows the quota, and no
	// memory held: its query makes no context (a program's own shows, as
	// above).
	smi := e.remoteAs(s, tok, "nvidia-smi", "--query-gpu=memory.total,memory.used,memory.free", "--format=csv,noheader")
	if want := fmt.Sprintf("%d MiB, 0 MiB, %d MiB\n", total>>20, total>>20); smi.code != 0 || smi.stdout != want {
		t.Errorf("nvidia-smi remotely: exit %d %q%s; want %q", smi.code, smi.stdout, smi.stderr, want)
	}
}

// nvidia-smi on a remote GPU is FlexGV's (NVIDIA's refuses the client's
// NVML), first on the PATH flexgv run --remote gives: it prints what it
// prints against the server's own NVML, in NVIDIA's forms, and refuses
// what it does not answer with a message.
func TestRemoteNvidiaSmi(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2")
	s := e.serve("unix")
	smi := filepath.Join(build, "remote", "bin", "nvidia-smi")
	local := func(args ...string) result { return e.run(smi, args...) }
	remote := func(args ...string) result { return e.remote(s, "nvidia-smi", args...) }
	const fields = "index,count,name,uuid,driver_version,pci.bus_id,compute_cap,persistence_mode,compute_mode," +
		"power.limit,enforced.power.limit,clocks.max.sm,clocks.max.memory,fan.speed,pstate,temperature.gpu"
	for _, args := range [][]string{
		{"--query-gpu=" + fields, "--format=csv"},
		{"--query-gpu=" + fields, "--format=csv,noheader,nounits"},
		{"-L"},
		{"--query-gpu=gpu_name,gpu_uuid", "--format=csv", "-i", "1"},
	} {
		l, r := local(args...), remote(args...)
		if l.code != 0 || r.code != 0 || l.stdout != r.stdout || r.stderr != "" {
			t.Errorf("nvidia-smi %q: locally exit %d\n%s%s\nremotely exit %d\n%s%s", args, l.code, l.stdout, l.stderr,
				r.code, r.stdout, r.stderr)
		}
	}
	// The forms scripts parse: a header with units, a row a GPU, [N/A]
	// for what is not measured (the simulated GPU has no fan).
	q := local("--query-gpu=index,memory.total,power.draw,utilization.gpu,fan.speed", "--format=csv")
	want := "index, memory.total [MiB], power.draw [W], utilization.gpu [%], fan.speed [%]\n" +
		"0, 16384 MiB, 60.00 W, 0 %, [N/A]\n1, 16384 MiB, 60.00 W, 0 %, [N/A]\n"
	if q.code != 0 || q.stdout != want {
		t.Errorf("query: exit %d\n%s%s\nwant\n%s", q.code, q.stdout, q.stderr, want)
	}
	uuid := regexp.MustCompile(`GPU 1: .* \(UUID: (GPU-[0-9a-f-]+)\)`).FindStringSubmatch(local("-L").stdout)
	if uuid == nil {
		t.Fatalf("no GPU 1 in -L")
	}
	if r := remote("--query-gpu=index", "--format=csv,noheader", "-i", uuid[1]); r.code != 0 || r.stdout != "1\n" {
		t.Errorf("-i by UUID: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	sum := remote()
	if sum.code != 0 || !regexp.MustCompile(`Driver Version: \d+\.\d+\.sim +CUDA Version: 13\.0`).MatchString(sum.stdout) ||
		len(regexp.MustCompile(`(?m)^\| +\d+MiB / +\d+MiB \|`).FindAllString(sum.stdout, -1)) != 0 ||
		len(regexp.MustCompile(`\d+MiB / +16384MiB`).FindAllString(sum.stdout, -1)) != 2 {
		t.Errorf("the summary remotely: exit %d\n%s%s", sum.code, sum.stdout, sum.stderr)
	}
	// -lms repeats until the program is stopped.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, smi, "--query-gpu=index", "--format=csv,noheader", "-i", "0", "-lms", "20")
	cmd.Env = e.environ(filepath.Join(build, "sim"))
	out, _ := cmd.Output()
	if n := strings.Count(string(out), "0\n"); n < 2 {
		t.Errorf("-lms 20 for 2 s printed %d rows: %q", n, out)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--query-gpu=index,bogus", "--format=csv"}, 2, `Field "bogus" is not a valid field to query`},
		{[]string{"--query-gpu=index"}, 2, "a query needs --format=csv"},
		{[]string{"--query-gpu=index", "--format=xml"}, 2, `"xml" is none of csv, noheader, nounits`},
		{[]string{"--format=csv"}, 2, "--format=csv is for --query-gpu"},
		{[]string{"-q"}, 2, `"-q" is not answered for FlexGV's remote GPUs`},
		{[]string{"-l", "0"}, 2, "-l 0: want whole seconds"},
		{[]string{"-L", "-i", "7"}, 6, `No devices were found matching "7" (2 GPUs here)`},
		{[]string{"-L", "-i", ","}, 6, `No devices were found matching "," (-i names none)`},
		{[]string{"-L", "-i", "GPU-f1e96000"}, 6, `"GPU-f1e96000" matches 2 GPUs: give more of a UUID`},
	} {
		r := remote(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) || r.stdout != "" {
			t.Errorf("nvidia-smi %q: exit %d, want %d and %q\n%s%s", c.args, r.code, c.code, c.msg, r.stdout, r.stderr)
		}
	}
	// No server: NVML does not start, and it says so.
	e.extra = append(e.extra, "FLEXGV_REMOTE=unix://"+filepath.Join(e.dir, "none.sock"))
	if r := e.runIn(filepath.Join(build, "remote"), smi, "-L"); r.code != 9 || !strings.Contains(r.stderr, "NVML did not start") {
		t.Errorf("without a server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
