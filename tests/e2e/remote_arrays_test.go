package e2e

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
)

// A program cannot use another connection's array or texture object, nor
// copy outside its own array: each attempt is refused with the driver's
// error before the driver sees it, the server says so, and both programs
// go on with their own.
func TestRemoteArraysRefused(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	cmd := exec.Command(bin("flexgv"), "run", "--remote", s.addr, "--", bin("arrays"), "hold")
	cmd.Env = e.environ("")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatal("arrays hold printed nothing")
	}
	theirs := strings.Fields(lines.Text())
	if len(theirs) != 2 {
		t.Fatalf("arrays hold printed %q", lines.Text())
	}
	for _, c := range []struct{ what, result, said string }{
		{"copy", "CUDA_ERROR_INVALID_HANDLE", "refusing fgrArrayCopyWait: p->dstArray=0x" + theirs[0] + " is not a handle"},
		{"desc", "CUDA_ERROR_INVALID_HANDLE", "refusing cuArray3DGetDescriptor_v2: hArray=0x" + theirs[0] + " is not a handle"},
		{"texon", "CUDA_ERROR_INVALID_HANDLE", "refusing cuTexObjectCreate: pResDesc->res.array.hArray=0x" + theirs[0]},
		{"texdesc", "CUDA_ERROR_INVALID_VALUE", "refusing cuTexObjectGetResourceDesc: texObject=0x" + theirs[1] + " is not an object this connection made"},
		{"texdestroy", "CUDA_ERROR_INVALID_VALUE", "refusing cuTexObjectDestroy: texObject=0x" + theirs[1] + " is not an object this connection made"},
		{"past", "CUDA_ERROR_INVALID_VALUE", "refusing fgrArrayCopyWait: the copy's extent lies outside its destination array"},
	} {
		r := e.remote(s, "arrays", "use", theirs[0], theirs[1], c.what)
		want := "use " + c.what + ": " + c.result + "\nuse: own array round trip ok\n"
		if r.code != 0 || r.stdout != want {
			t.Errorf("use %s: exit %d\n%s%s\nwant\n%s", c.what, r.code, r.stdout, r.stderr, want)
		}
		if !strings.Contains(s.Log(), c.said) {
			t.Errorf("use %s: the server did not say %q:\n%s", c.what, c.said, s.Log())
		}
	}
	stdin.Close()
	if !lines.Scan() || lines.Text() != "hold: copy CUDA_SUCCESS, destroy CUDA_SUCCESS" {
		t.Errorf("the holder, after the others: %q", lines.Text())
	}
}
