package e2e

import (
	"strings"
	"testing"
)

// What a GEMM library asks of the driver (blaslike: old ABIs looked up by
// name, library options without values, kernel attributes and functions,
// tensor maps, pitched 2D copies, context questions) gets the same answers
// remotely as locally, over each transport; remotely every name is found.
// The answers the client keeps stay right after the calls that change
// them, and the questions asked again make no round trip.
func TestRemoteBlasLike(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2")
	local := e.run("blaslike")
	if local.code != 0 {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	// The simulated GPU exports only what it simulates; the driver all of these.
	strip := func(s string) string { return s[:strings.LastIndex(strings.TrimSuffix(s, "\n"), "\n")+1] }
	for _, want := range []string{
		"device 1's primary context: flags 0 active 0, retained: active 1, flags set: 4, released: active 0\n",
		"devices: current 1, the primary's 0 (active 1), after a pop 0, of a destroyed context CUDA_ERROR_INVALID_CONTEXT\n",
		"set too high CUDA_ERROR_INVALID_VALUE: CUDA_SUCCESS 2048\n", "reloaded: dynamic shared memory 0\n",
		"2D up and down: CUDA_SUCCESS CUDA_SUCCESS, the same rows, gaps untouched\n",
		"2D with a pitch under the width: CUDA_ERROR_INVALID_VALUE; with no width: CUDA_SUCCESS\n",
		"2D past the allocation: CUDA_ERROR_INVALID_VALUE\n",
		"; refused: rank 2 CUDA_ERROR_INVALID_VALUE, mode 2 CUDA_ERROR_INVALID_VALUE\n",
		// As an H100's driver 580 answers (docs/MEASUREMENTS.md).
		"wide im2col of 64 halves, swizzles 0-4: CUDA_SUCCESS CUDA_ERROR_INVALID_VALUE CUDA_ERROR_INVALID_VALUE CUDA_SUCCESS CUDA_ERROR_INVALID_VALUE\n"} {
		if !strings.Contains(local.stdout, want) {
			t.Errorf("locally, no %q in\n%s", want, local.stdout)
		}
	}
	unix, tcp := e.serve("unix"), e.serve("tcp")
	for _, transport := range []string{"unix", "shm", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			s := unix
			switch transport {
			case "shm": // the same server, dialled as shm://
				s = &server{addr: strings.Replace(unix.addr, "unix://", "shm://", 1)}
			case "tcp":
				s = tcp
			}
			r := e.remote(s, "blaslike")
			if r.code != 0 || strip(r.stdout) != strip(local.stdout) {
				t.Errorf("remotely: exit %d\n%s\nlocally:\n%s\n%s", r.code, r.stdout, local.stdout, r.stderr)
			}
			if !strings.HasSuffix(r.stdout, "names not found: none\n") {
				t.Errorf("remotely, names not found:\n%s", r.stdout)
			}
		})
	}
	// Asked 200 more times, the kept answers make no more round trips.
	s := unix
	e.extra = append(e.extra, "FLEXGV_REMOTE_LOG=calls")
	once, many := e.remote(s, "blaslike", "0"), e.remote(s, "blaslike", "200")
	a, b := roundTrips(once), roundTrips(many)
	if once.code != 0 || many.code != 0 || len(a) == 0 {
		t.Fatalf("FLEXGV_REMOTE_LOG=calls: exit %d, %d\n%s", once.code, many.code, many.stderr)
	}
	for _, call := range []string{"cuCtxGetDevice", "cuCtxGetDevice_v2", "cuDevicePrimaryCtxGetState",
		"cuKernelGetAttribute", "cuKernelGetFunction", "cuKernelSetAttribute",
		"cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"} {
		if a[call] != b[call] {
			t.Errorf("%s: %d round trips asked once, %d asked 200 more times", call, a[call], b[call])
		}
	}
	if !strings.Contains(many.stderr, "round trips,") {
		t.Errorf("no summary of calls:\n%s", many.stderr)
	}
}
