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
	// a name no executor gave (one this connection's executor deciphers
	// to nothing), and the other program's
	forged := "5eed0000f00d"
	for _, c := range []struct{ what, array, result, said string }{
		{"copy", forged, "CUDA_ERROR_INVALID_HANDLE", "refusing fgrArrayCopyWait: p->dstArray=0x" + forged + " is not a handle"},
		{"copy", theirs[0], "CUDA_ERROR_INVALID_HANDLE", "refusing fgrArrayCopyWait: p->dstArray=0x" + theirs[0] + " is not a handle"},
		{"desc", theirs[0], "CUDA_ERROR_INVALID_HANDLE", "refusing cuArray3DGetDescriptor_v2: hArray=0x" + theirs[0] + " is not a handle"},
		{"texon", theirs[0], "CUDA_ERROR_INVALID_HANDLE", "refusing cuTexObjectCreate: pResDesc->res.array.hArray=0x" + theirs[0]},
		{"texdesc", theirs[0], "CUDA_ERROR_INVALID_VALUE", "refusing cuTexObjectGetResourceDesc: texObject=0x" + theirs[1] + " is not an object this connection made"},
		{"texdestroy", theirs[0], "CUDA_ERROR_INVALID_VALUE", "refusing cuTexObjectDestroy: texObject=0x" + theirs[1] + " is not an object this connection made"},
		{"past", theirs[0], "CUDA_ERROR_INVALID_VALUE", "refusing fgrArrayCopyWait: the copy's extent lies outside its destination array"},
	} {
		r := e.remote(s, "arrays", "use", c.array, theirs[1], c.what)
		want := "use " + c.what + ": " + c.result + "\nuse: own array round trip ok\n"
		if r.code != 0 || r.stdout != want {
			t.Errorf("use %s %s: exit %d\n%s%s\nwant\n%s", c.what, c.array, r.code, r.stdout, r.stderr, want)
		}
		if !strings.Contains(s.Log(), c.said) {
			t.Errorf("use %s %s: the server did not say %q:\n%s", c.what, c.array, c.said, s.Log())
		}
	}
	stdin.Close()
	if !lines.Scan() || lines.Text() != "hold: copy CUDA_SUCCESS, destroy CUDA_SUCCESS" {
		t.Errorf("the holder, after the others: %q", lines.Text())
	}
}

// The simulated GPU keeps arrays' texels where copies put them, in their
// layout, and checks arrays, copies and objects as the driver does: what
// the remote runs are compared with.
func TestArraysOnTheSimulatedGPU(t *testing.T) {
	e := newEnv(t)
	r := e.run("arrays")
	want := `1d: element 10.. read back same (5 29.5)
1d: 100x0 format 32 channels 1
1d copies: hash be197f25, past the end CUDA_ERROR_INVALID_VALUE
1d wide: same
2d: sub-rectangle same, hash df2d69e1
2d: 64x32x0 format 1 channels 4 flags 2
2d: through device memory and another array same
3d: box corner 1402, far corner 2606
3d: 16x8x4 format 32 channels 1 flags 0
layered: layer 0 hash e6a1d1c5, layer 2 same
layered: 8x8x3 format 2 channels 2 flags 1
cubemap: face 4 same
cubemap: 8x8x6 format 1 channels 1 flags 4
large: same, hash fc971dc5
mip level 2: 16x16x0 format 32 channels 1 flags 0
mip level 2: same
mip level 9: CUDA_ERROR_INVALID_VALUE
mipmapped array of 8 levels for 64x64: CUDA_ERROR_INVALID_VALUE
textures: made
texture 0: type 0, its array the same
texture 1: type 1, its mipmapped array the same
texture 2: type 3, its memory, 64x32
texture 3: filter 1, address 1, flags 2, clamp 3
texture 0 view: 64x32
surface: type 0, its array the same
surface on an array without surface loads and stores: CUDA_ERROR_INVALID_VALUE
cubemap of 8x4 faces: CUDA_ERROR_INVALID_VALUE
array of 3 channels: CUDA_ERROR_INVALID_VALUE
copy past the last slice: CUDA_ERROR_INVALID_VALUE
copy of a row wider than the array: CUDA_ERROR_INVALID_VALUE
texture past its memory: CUDA_ERROR_INVALID_VALUE
texture 0 once destroyed: CUDA_ERROR_INVALID_VALUE
its description: CUDA_ERROR_INVALID_VALUE
array once destroyed: CUDA_ERROR_INVALID_HANDLE
arrays: ok
`
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d\n%s%s\nwant\n%s", r.code, r.stdout, r.stderr, want)
	}
}

// A two-plane (NV12) array, made for the video engines, hands out each plane as an array of its own
// (the luma a byte a texel, the chroma two of half the width and height),
// the same one each time, whose texels copies write and read; a third
// plane, a plane of a one-plane array and NV12 layouts the driver does not
// make are refused. Remotely as locally over every transport (refused
// there as not carried before).
func TestRemoteTwoPlaneArrays(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"arrays", "planes"},
		// as an H100's driver answers (2026-12-06): NV12 is for the video engines
		"nv12 64x32 of 3 channels, not for video: CUDA_ERROR_INVALID_VALUE\nnv12 64x32 of 3 channels for video: CUDA_SUCCESS\n",
		"the array: 64x32x0 format 176 channels 3 flags 256\n",
		"plane 0: 64x32x0 format 1 channels 1 flags 256\nplane 1: 32x16x0 format 1 channels 2 flags 256\nplane 2: CUDA_ERROR_INVALID_VALUE\nplane 0 again: the same array\n",
		"luma: same, hash 64d313c5; chroma: same, hash 6a2c1ec5\nluma after the chroma: same\nchroma past its 16 rows: CUDA_ERROR_INVALID_VALUE\n",
		"a plane of a one-plane array: CUDA_ERROR_INVALID_VALUE\n",
	)
	printsAsLocally(t, local, []string{"arrays", "planes"}, "unix", "shm", "tcp")
	// A plane described once its array is gone: a real driver crashes the
	// program (H200, 2026-12-06); the simulated GPU and a server refuse it.
	gone := runsLocally(t, e, []string{"arrays", "planegone"}, "a plane after its array: descriptor CUDA_ERROR_INVALID_HANDLE\n")
	printsAsLocally(t, gone, []string{"arrays", "planegone"}, "unix", "shm", "tcp")
}
