package remote

import "testing"

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
