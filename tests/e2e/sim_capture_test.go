package e2e

import (
	"strings"
	"testing"
)

// captureOutput runs captureclient natively on the simulated GPU and
// compares what it printed with want.
func captureOutput(t *testing.T, e *env, want string, args ...string) {
	t.Helper()
	r := e.run("captureclient", args...)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("captureclient %s: exit %d, stderr %q\ngot:\n%s\nwant:\n%s", strings.Join(args, " "), r.code,
			r.stderr, r.stdout, want)
	}
}

// Each capture mode decides whether another thread's synchronous
// allocation and release are refused (and break the capture); a capture
// that survives becomes a graph whose allocation takes graph memory only
// when it runs.
func TestSimCaptureModes(t *testing.T) {
	captureOutput(t, newEnv(t), `global: cuStreamBeginCapture_v2 = CUDA_SUCCESS
global: cuMemAllocAsync = CUDA_SUCCESS
global: other thread cuMemAlloc_v2 = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
global: other thread cuMemFree_v2 = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
global: cuStreamIsCapturing = CUDA_SUCCESS INVALIDATED
global: cuMemFreeAsync = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
global: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
thread_local: cuStreamBeginCapture_v2 = CUDA_SUCCESS
thread_local: cuMemAllocAsync = CUDA_SUCCESS
thread_local: other thread cuMemAlloc_v2 = CUDA_SUCCESS
thread_local: other thread cuMemFree_v2 = CUDA_SUCCESS
thread_local: cuStreamIsCapturing = CUDA_SUCCESS ACTIVE
thread_local: cuMemFreeAsync = CUDA_SUCCESS
thread_local: cuStreamEndCapture = CUDA_SUCCESS, graph returned
thread_local graph: cuGraphInstantiateWithFlags = CUDA_SUCCESS
thread_local graph: cuGraphLaunch = CUDA_SUCCESS
thread_local graph: cuStreamSynchronize = CUDA_SUCCESS
thread_local graph: graph memory used 0 (high 4) reserved 4 (high 4) MiB
relaxed: cuStreamBeginCapture_v2 = CUDA_SUCCESS
relaxed: cuMemAllocAsync = CUDA_SUCCESS
relaxed: other thread cuMemAlloc_v2 = CUDA_SUCCESS
relaxed: other thread cuMemFree_v2 = CUDA_SUCCESS
relaxed: cuStreamIsCapturing = CUDA_SUCCESS ACTIVE
relaxed: cuMemFreeAsync = CUDA_SUCCESS
relaxed: cuStreamEndCapture = CUDA_SUCCESS, graph returned
relaxed graph: cuGraphInstantiateWithFlags = CUDA_SUCCESS
relaxed graph: cuGraphLaunch = CUDA_SUCCESS
relaxed graph: cuStreamSynchronize = CUDA_SUCCESS
relaxed graph: graph memory used 0 (high 4) reserved 4 (high 4) MiB
`, "modes")
}

// A library inside a thread-local capture: its stream-ordered workspace is
// captured, its synchronous allocation succeeds only in relaxed mode (and
// otherwise invalidates the capture), and the legacy stream reports the
// implicit dependency on the blocking capturing stream without breaking it.
func TestSimCaptureWorkspace(t *testing.T) {
	captureOutput(t, newEnv(t), `relaxed library: cuStreamBeginCapture_v2 = CUDA_SUCCESS
relaxed library: library cuStreamIsCapturing = CUDA_SUCCESS ACTIVE
relaxed library: library cuMemAllocAsync workspace = CUDA_SUCCESS
relaxed library: library cuMemsetD8Async = CUDA_SUCCESS
relaxed library: library cuMemFreeAsync workspace = CUDA_SUCCESS
relaxed library: library cuThreadExchangeStreamCaptureMode = CUDA_SUCCESS, was global
relaxed library: library cuMemAlloc_v2 = CUDA_SUCCESS
relaxed library: library restores its mode = CUDA_SUCCESS, was relaxed
legacy stream: cuStreamIsCapturing = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
relaxed library: cuStreamIsCapturing = CUDA_SUCCESS ACTIVE
relaxed library: cuStreamEndCapture = CUDA_SUCCESS, graph returned
relaxed library: 3 node(s): MEM_ALLOC(8 MiB on device 0) MEMSET MEM_FREE
relaxed library: cuGraphInstantiateWithFlags = CUDA_SUCCESS
relaxed library: cuGraphLaunch = CUDA_SUCCESS
relaxed library: cuStreamSynchronize = CUDA_SUCCESS
relaxed library: graph memory used 0 (high 8) reserved 8 (high 8) MiB
strict library: cuStreamBeginCapture_v2 = CUDA_SUCCESS
strict library: library cuStreamIsCapturing = CUDA_SUCCESS ACTIVE
strict library: library cuMemAllocAsync workspace = CUDA_SUCCESS
strict library: library cuMemsetD8Async = CUDA_SUCCESS
strict library: library cuMemFreeAsync workspace = CUDA_SUCCESS
strict library: library cuMemAlloc_v2 = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
legacy stream: cuStreamIsCapturing = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
strict library: cuStreamIsCapturing = CUDA_SUCCESS INVALIDATED
strict library: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
`, "workspace")
}

// Explicit allocation and free nodes: the address is fixed when the node is
// made, device memory is reserved at upload, used while the allocation
// lives, kept by the pool after it is freed (by another graph or by
// cuMemFree_v2) until a trim, and an allocation still in use blocks its
// graph's next launch (unless it frees on launch) and outlives the graph.
// Free nodes follow their allocation; graphs with memory nodes are
// instantiated once and never nested.
func TestSimCaptureGraphMemoryNodes(t *testing.T) {
	captureOutput(t, newEnv(t), `cuGraphAddMemAllocNode = CUDA_SUCCESS
cuGraphAddMemFreeNode, another graph = CUDA_SUCCESS
cuGraphAddMemFreeNode, twice = CUDA_ERROR_INVALID_VALUE
cuGraphAddMemFreeNode, not a graph allocation = CUDA_ERROR_INVALID_VALUE
allocating graph: 1 node(s): MEM_ALLOC(64 MiB on device 0)
freeing graph: 1 node(s): MEM_FREE
second instantiation = CUDA_ERROR_INVALID_VALUE
instantiated: device memory taken 0 MiB
instantiated: graph memory used 0 (high 0) reserved 0 (high 0) MiB
cuGraphUpload = CUDA_SUCCESS
uploaded: device memory taken 64 MiB
uploaded: graph memory used 0 (high 0) reserved 64 (high 64) MiB
cuGraphLaunch allocating = CUDA_SUCCESS
allocated: graph memory used 64 (high 64) reserved 64 (high 64) MiB
cuGraphLaunch allocating again = CUDA_ERROR_INVALID_VALUE
cuGraphLaunch freeing = CUDA_SUCCESS
freed by the other graph: graph memory used 0 (high 64) reserved 64 (high 64) MiB
cuGraphLaunch allocating again = CUDA_SUCCESS
cuMemFree_v2 of the graph allocation = CUDA_SUCCESS
cuMemFree_v2 again = CUDA_ERROR_INVALID_VALUE
device memory taken 64 MiB
freed: graph memory used 0 (high 64) reserved 64 (high 64) MiB
cuDeviceGraphMemTrim = CUDA_SUCCESS
trimmed: device memory taken 0 MiB
trimmed: graph memory used 0 (high 64) reserved 0 (high 64) MiB
reset USED_MEM_HIGH = CUDA_SUCCESS
set USED_MEM_HIGH to 1 = CUDA_ERROR_INVALID_VALUE
set USED_MEM_CURRENT = CUDA_ERROR_INVALID_VALUE
reset: graph memory used 0 (high 0) reserved 0 (high 64) MiB
cuGraphLaunch allocating = CUDA_SUCCESS
executable and graph destroyed: device memory taken 64 MiB
destroyed: graph memory used 64 (high 64) reserved 64 (high 64) MiB
cuGraphLaunch freeing = CUDA_SUCCESS
freed and trimmed: device memory taken 0 MiB
free node not after its allocation = CUDA_ERROR_INVALID_VALUE
free node after its allocation = CUDA_SUCCESS
freed in its own graph, freed by another = CUDA_ERROR_INVALID_VALUE
cuGraphInstantiateWithParams with upload = CUDA_SUCCESS, result SUCCESS
uploaded at instantiation: device memory taken 32 MiB
cuGraphLaunch = CUDA_SUCCESS
cuGraphLaunch = CUDA_SUCCESS
self-freeing graph: graph memory used 0 (high 64) reserved 32 (high 64) MiB
as a child graph = CUDA_ERROR_INVALID_VALUE
auto-free: cuGraphLaunch = CUDA_SUCCESS
auto-free: cuGraphLaunch again = CUDA_SUCCESS
auto-free: graph memory used 16 (high 64) reserved 32 (high 64) MiB
auto-free: cuMemFreeAsync = CUDA_SUCCESS
child graph node = CUDA_SUCCESS
parent: 1 node(s): GRAPH
cuGraphChildGraphNodeGetGraph = CUDA_SUCCESS
child: 0 node(s):
cuGraphChildGraphNodeGetGraph of an allocation node = CUDA_ERROR_INVALID_VALUE
all freed and trimmed: device memory taken 0 MiB
`, "nodes")
}

// Graph memory is device memory: other processes see it through NVML, and
// it runs out against what they hold.
func TestSimCaptureGraphMemoryIsDeviceMemory(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_MEM=1GiB", "FLEXGV_SIM_CTX_MEM=100MiB")
	h := e.startHeld(nil, bin("captureclient"), "big", "300", "hold")
	if !strings.Contains(h.output, "cuGraphLaunch = CUDA_SUCCESS\n") ||
		!strings.Contains(h.output, "launched: graph memory used 0 (high 300) reserved 300 (high 300) MiB\ndevice memory taken 300 MiB\n") {
		t.Fatalf("launch of a 300 MiB graph:\n%s", h.output)
	}
	d := nvmlDevices(t, e)[0]
	if want := uint64(400) << 20; d.used != want || d.procs[h.cmd.Process.Pid] != want {
		t.Fatalf("NVML should see the context and the graph pool (%d bytes): %+v", want, d)
	}

	// 1 GiB - 400 MiB held leaves no room for a 600 MiB graph (and its
	// context) in a second process.
	r := e.run("captureclient", "big", "600")
	if r.code != 0 || !strings.Contains(r.stdout, "cuGraphLaunch = CUDA_ERROR_OUT_OF_MEMORY\n") ||
		!strings.Contains(r.stdout, "graph memory used 0 (high 0) reserved 0 (high 0) MiB\ndevice memory taken 0 MiB\n") {
		t.Fatalf("a second process's graph should not fit:\n%+v", r)
	}
	h.finish()
	d = nvmlDevices(t, e)[0]
	if d.used != 0 {
		t.Fatalf("memory left after the process trimmed and exited: %+v", d)
	}
	r = e.run("captureclient", "big", "600")
	if !strings.Contains(r.stdout, "cuGraphLaunch = CUDA_SUCCESS\n") {
		t.Fatalf("once the first process is gone the graph fits:\n%+v", r)
	}
}

// A graph larger than the device fails to launch with out-of-memory and
// leaves nothing behind: not in the pool, not in the device's memory.
func TestSimCaptureOverSizeGraph(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_MEM=2GiB", "FLEXGV_SIM_CTX_MEM=100MiB")
	h := e.startHeld(nil, bin("captureclient"), "big", "4096", "hold")
	want := `cuMemAllocAsync 4096 MiB = CUDA_SUCCESS
cuMemFreeAsync = CUDA_SUCCESS
cuStreamEndCapture = CUDA_SUCCESS
cuGraphInstantiateWithFlags = CUDA_SUCCESS
cuGraphLaunch = CUDA_ERROR_OUT_OF_MEMORY
cuStreamSynchronize = CUDA_SUCCESS
launched: graph memory used 0 (high 0) reserved 0 (high 0) MiB
device memory taken 0 MiB
ready
`
	if h.output != want {
		t.Fatalf("over-size graph:\n%s\nwant:\n%s", h.output, want)
	}
	d := nvmlDevices(t, e)[0]
	if ctx := uint64(100) << 20; d.used != ctx || d.procs[h.cmd.Process.Pid] != ctx {
		t.Fatalf("only the context should hold memory: %+v", d)
	}
	h.finish()
}

// What conflicts with capture in any mode fails and invalidates it; what
// stays legal leaves it alone; work forks to other streams and joins back
// through events, and the captured kernels and copies run at launch.
func TestSimCaptureRules(t *testing.T) {
	captureOutput(t, newEnv(t), `sync of the capturing stream: cuStreamSynchronize = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
after it: cuStreamIsCapturing = CUDA_SUCCESS INVALIDATED
after it: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
query of the capturing stream: cuStreamQuery = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
after it: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
context sync while capturing: cuCtxSynchronize = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
after it: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
legacy stream: cuStreamIsCapturing = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
blocking stream after that: cuStreamIsCapturing = CUDA_SUCCESS ACTIVE
legacy stream work: cuMemsetD8Async = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
after it: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
synchronous copy: cuMemcpyHtoD_v2 = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
after it: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
synchronous copy, non-blocking capture: cuMemcpyHtoD_v2 = CUDA_SUCCESS
after it: cuStreamEndCapture = CUDA_SUCCESS, graph returned
during capture: cuCtxGetDevice = CUDA_SUCCESS
during capture: cuStreamGetDevice = CUDA_SUCCESS
during capture: cuDeviceGetMemPool = CUDA_SUCCESS
during capture: cuMemPoolGetAttribute = CUDA_SUCCESS
during capture: cuDeviceGetGraphMemAttribute = CUDA_SUCCESS
after them: cuStreamIsCapturing = CUDA_SUCCESS ACTIVE
global: cuStreamEndCapture from another thread = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
global: cuStreamEndCapture = CUDA_SUCCESS, graph returned
relaxed: cuStreamEndCapture from another thread = CUDA_SUCCESS
relaxed, ended elsewhere: cuStreamIsCapturing = CUDA_SUCCESS NONE
other thread in relaxed mode: cuMemAlloc_v2 = CUDA_SUCCESS
other thread in thread_local mode: cuMemAlloc_v2 = CUDA_SUCCESS
other thread in global mode: cuMemAlloc_v2 = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
global capture: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
legacy begin: other thread cuMemAlloc_v2 = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
legacy begin: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
fork: cuEventRecord = CUDA_SUCCESS
fork: cuStreamWaitEvent = CUDA_SUCCESS
side stream: cuStreamIsCapturing = CUDA_SUCCESS ACTIVE
side: cuLaunchKernel fill = CUDA_SUCCESS
side: cuMemcpyDtoHAsync_v2 = CUDA_SUCCESS
join: cuEventRecord = CUDA_SUCCESS
join: cuStreamWaitEvent = CUDA_SUCCESS
joined: cuStreamEndCapture = CUDA_SUCCESS, graph returned
side stream after the end: cuStreamIsCapturing = CUDA_SUCCESS NONE
joined: 2 node(s): KERNEL MEMCPY
joined: host buffer before launch 0 0 0 0
joined: cuGraphLaunch = CUDA_SUCCESS
joined: host buffer after launch 7 7 7 7
unjoined: side cuMemsetD8Async = CUDA_SUCCESS
captured event: cuEventQuery = CUDA_ERROR_CAPTURED_EVENT
after it: cuStreamIsCapturing = CUDA_SUCCESS INVALIDATED
unjoined: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
unjoined: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_UNJOINED, graph NULL
side stream after the end: cuStreamIsCapturing = CUDA_SUCCESS NONE
outside event: cuStreamWaitEvent = CUDA_ERROR_STREAM_CAPTURE_ISOLATION
after it: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
executable graph launched into a capture: cuGraphLaunch = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
after it: cuStreamEndCapture = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph NULL
`, "rules")
}

// Threads capturing and allocating at once: each one's thread-local
// capture is invalidated by its own synchronous allocation and by nothing
// the others do.
func TestSimCaptureThreads(t *testing.T) {
	captureOutput(t, newEnv(t), "threads: 16 x 50 captures, 0 unexpected results; then graph memory used 0 reserved 0\n",
		"threads", "16")
}
