package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FLEXGV_REMOTE_ADDRESS_FILE names the server in place of FLEXGV_REMOTE
// (a node's daemon rewrites it when a pod's remote vGPU moves); one that
// cannot be read, or holds no address, is said, and FLEXGV_REMOTE used.
func TestRemoteAddressFile(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	local := e.run("rtlike", "1")
	file := filepath.Join(t.TempDir(), "address")
	os.WriteFile(file, []byte(s.addr+"\n"), 0o644)
	e.extra = []string{"FLEXGV_REMOTE_ADDRESS_FILE=" + file}
	r := e.runIn("", "flexgv", "run", "--remote", "unix:///nowhere.sock", "--", bin("rtlike"), "1")
	if r.code != 0 || r.stdout != local.stdout {
		t.Errorf("dialled by the file: exit %d\n%s%s\nwant\n%s", r.code, r.stdout, r.stderr, local.stdout)
	}
	for _, c := range []struct{ content, said string }{
		{"", "holds no address"},
		{"unix:///a.sock unix:///b.sock\n", "holds no address"},
	} {
		os.WriteFile(file, []byte(c.content), 0o644)
		r := e.remote(s, "rtlike", "1")
		if r.code != 0 || r.stdout != local.stdout || !strings.Contains(r.stderr, "the address file "+file+" (FLEXGV_REMOTE_ADDRESS_FILE) "+c.said) ||
			!strings.Contains(r.stderr, "using FLEXGV_REMOTE="+s.addr+" instead") {
			t.Errorf("file holding %q: exit %d\n%s%s", c.content, r.code, r.stdout, r.stderr)
		}
	}
	e.extra = []string{"FLEXGV_REMOTE_ADDRESS_FILE=" + file + ".gone"}
	r = e.remote(s, "rtlike", "1")
	if r.code != 0 || r.stdout != local.stdout || !strings.Contains(r.stderr, "cannot read "+file+".gone (FLEXGV_REMOTE_ADDRESS_FILE): No such file") {
		t.Errorf("no file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
