package e2e

import (
	"strings"
	"testing"
	"time"
)

// What the driver prints for a program (device printf) reaches the
// program remotely as locally: on its stdout, at the synchronization that
// collects it, among its own lines, over every transport.
func TestRemoteDeviceOutput(t *testing.T) {
	e := newEnv(t)
	local := e.run("devprint")
	if local.code != 0 || !strings.Contains(local.stdout, "launched\ndevice printf: 7\nafter") {
		t.Fatalf("devprint locally: exit %d %q %q", local.code, local.stdout, local.stderr)
	}
	unix, tcp := e.serve("unix"), e.serve("tcp")
	for _, c := range []struct {
		s    *server
		addr string
	}{{unix, unix.addr}, {unix, strings.Replace(unix.addr, "unix://", "shm://", 1)}, {tcp, tcp.addr}} {
		s, transport := c.s, c.addr[:strings.Index(c.addr, ":")]
		if r := e.runIn("", "flexgv", "run", "--remote", c.addr, "--", bin("devprint")); r.code != 0 || r.stdout != local.stdout {
			t.Errorf("devprint over %s: exit %d\n%s\nwant\n%s\n%s", transport, r.code, r.stdout, local.stdout, r.stderr)
		}
		if strings.Contains(s.Log(), "device printf") {
			t.Errorf("the program's output reached the server's log over %s:\n%s", transport, s.Log())
		}
	}
}

// A tenant's executor's stderr (the shim's refusal there) reaches the
// program's stderr, as it does under flexgv run locally, and stays in the
// server's log.
func TestRemoteTenantRefusalReachesTheProgram(t *testing.T) {
	e := quotaEnv(t)
	tok := e.token("a")
	s := e.serve("unix", "--tenant", "a:"+tok, "--mem", "256MiB", "--ctx-mem", "64MiB")
	r := e.remoteAs(s, tok, "memclient", "exact")
	const said = `tenant a: device 0 (GPU-`
	if r.code != 0 || !strings.Contains(r.stderr, said) || !strings.Contains(r.stderr, "refused with CUDA_ERROR_OUT_OF_MEMORY") {
		t.Errorf("memclient exact in tenant a: exit %d, stderr %q, want the shim's refusal", r.code, r.stderr)
	}
	s.waitLog(`tenant a: device 0 .*quota 256MiB.*refused with CUDA_ERROR_OUT_OF_MEMORY`, 10*time.Second)
}
