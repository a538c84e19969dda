package remote

import (
	"strings"
	"testing"
)

func TestParseAddr(t *testing.T) {
	for in, want := range map[string]Addr{
		"unix:///run/flexgv.sock": {"unix", "/run/flexgv.sock"},
		"shm:///run/flexgv.sock":  {"shm", "/run/flexgv.sock"},
		"tcp://0.0.0.0:7070":      {"tcp", "0.0.0.0:7070"},
		"tcp://[::1]:7070":        {"tcp", "[::1]:7070"},
		"tcp://gpu-host:1":        {"tcp", "gpu-host:1"},
		"tls://gpu-host:7070":     {"tls", "gpu-host:7070"},
	} {
		got, err := ParseAddr(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("%s: %+v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "/run/x.sock", "unix://run/x.sock", "unix://", "tcp://host", "tcp://host:0",
		"tcp://host:65536", "tcp://host:http", "tcp://host:1/path", "http://host:1", "tls://host", "tls://host:0", "shm://run/x.sock", "unix:///" + string(make([]byte, 120))} {
		if a, err := ParseAddr(bad); err == nil {
			t.Errorf("%q: accepted as %+v", bad, a)
		}
	}
}

func TestParseGPUs(t *testing.T) {
	for in, want := range map[string]string{"": "", "0": "0", "1, 0": "1,0", "03": "3", "GPU-8f2c1e4a": "GPU-8f2c1e4a"} {
		if got, err := ParseGPUs(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"x", "-1", "0,0", "0,,1", "GPU-", "1,01"} {
		if got, err := ParseGPUs(bad); err == nil {
			t.Errorf("%q: accepted as %q", bad, got)
		}
	}
}

// An executors' user is looked up with its groups: root, or a user in
// root's group, is refused; its primary group is not repeated among the
// others (nobody has none).
func TestLookupExecUser(t *testing.T) {
	for _, name := range []string{"root", "0"} {
		if _, err := LookupExecUser(name); err == nil || !strings.Contains(err.Error(), "is root") {
			t.Errorf("%s: %v, want refused as root", name, err)
		}
	}
	if _, err := LookupExecUser("no-such-user-here"); err == nil || !strings.Contains(err.Error(), "no user no-such-user-here") {
		t.Errorf("a user that does not exist: %v", err)
	}
	u, err := LookupExecUser("nobody")
	if err != nil {
		t.Skipf("no nobody here: %v", err)
	}
	if u.Uid == 0 || len(u.Groups) != 0 || u.Groups == nil {
		t.Errorf("nobody: %+v, want its own ids and an empty list of other groups", u)
	}
}
