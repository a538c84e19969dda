package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A program linked with -lcuda that calls the families NVIDIA's driver API
// samples need (occupancy with a host callback, the profiler's range,
// stream attributes, cuCtxCreate_v4, function attributes) prints over each
// transport what it prints with the GPU in its own process.
func TestRemoteFamiliesMatchLocal(t *testing.T) {
	e := newEnv(t)
	local := e.run("families")
	if local.code != 0 || !strings.Contains(local.stdout, "families: done") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	// What the driver refuses, as the simulated GPU (and the client, from
	// the same code) refuses it.
	for _, want := range []string{
		"cuCtxCreate_v4 with 0 SMs: CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY device -1\n", // outside MPS, whatever the count (H200)
		"cuFuncGetName: vecadd, the same string again: 1\n",
		"module functions: 4: vecadd (as looked up) fill empty busy\n",
		"copy batch: down[1] 7 down[255] 249, the legacy stream: CUDA_ERROR_INVALID_VALUE, an attribute past the batch: CUDA_ERROR_INVALID_VALUE\n",
		"batch on memory freed: CUDA_ERROR_INVALID_VALUE\n",
		"host flags 0x3, of cuMemAllocHost's 0x3, inside 0x3; registered: CUDA_ERROR_INVALID_VALUE, freed: CUDA_ERROR_INVALID_VALUE, pageable: CUDA_ERROR_INVALID_VALUE\n",
		"context flags 0, set 0x4, bad: CUDA_ERROR_INVALID_VALUE\n",
		"context event while a stream is held: CUDA_ERROR_NOT_READY, a stream after a context wait: CUDA_ERROR_NOT_READY; released: CUDA_SUCCESS CUDA_SUCCESS\n",
		"context event: no event CUDA_ERROR_INVALID_HANDLE, no context CUDA_ERROR_INVALID_CONTEXT\n",
		"context event during a capture: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, the capture then CUDA_ERROR_STREAM_CAPTURE_INVALIDATED\n",
		"current pool: the one set; no pool: CUDA_ERROR_INVALID_VALUE; its threshold 1048576, opportunistic reuse 1 then 0; " +
			"its used high mark set to 5: CUDA_ERROR_INVALID_VALUE, to 0: CUDA_SUCCESS, its used memory set: " +
			"CUDA_ERROR_INVALID_VALUE; after its destroy: the default\n",
		"host atomics: CUDA_SUCCESS 0 0 0; an unknown operation: CUDA_ERROR_INVALID_VALUE, none asked: CUDA_ERROR_INVALID_VALUE; between device 0 and itself: CUDA_ERROR_INVALID_DEVICE\n",
	} {
		if !strings.Contains(local.stdout, want) {
			t.Errorf("locally, lacks %q:\n%s", want, local.stdout)
		}
	}
	sameRemotely(t, local, "families")
}

// sameRemotely runs a client over each transport: it must exit 0 and print
// what it printed locally.
func sameRemotely(t *testing.T, local result, name string, args ...string) {
	for _, transport := range []string{"shm", "unix", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t)
			s := e.serve(transport)
			got := e.remote(s, name, args...)
			if got.code != 0 || got.stdout != local.stdout {
				t.Errorf("remotely exit %d, printed\n%s\nlocally\n%s\nstderr:\n%s", got.code, got.stdout, local.stdout, got.stderr)
			}
		})
	}
}

// cuCtxCreate_v4 with CUDA-in-graphics parameters is refused on the client
// with CUDA_ERROR_NOT_SUPPORTED, its reason said once however often asked;
// the program goes on.
func TestRemoteCtxCreateGraphicsRefused(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	r := e.remote(s, "families", "cig")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"cuCtxCreate_v4 with graphics: CUDA_ERROR_NOT_SUPPORTED", "cuCtxCreate_v4 with graphics again: CUDA_ERROR_NOT_SUPPORTED"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	said := "cuCtxCreate_v4: CUDA-in-graphics parameters (cigParams)"
	if n := strings.Count(r.stderr, said); n != 1 {
		t.Errorf("the refusal was said %d times:\n%s", n, r.stderr)
	}
}

// Features a remote GPU does not give read as absent, whatever the
// server's GPU has, so that a program that checks takes its own path (NCCL
// its multicast, a library its GPUDirect RDMA); what it gives reads as the
// server's GPU says.
func TestRemoteAttributesTellWhatRemoteGives(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_ATTRS=132=1,116=1,124=1,112=1,114=1,136=3,86=1")
	local := e.run("families", "features")
	for _, want := range []string{"multicast: 1\n", "GPUDirect RDMA: 1\n", "dma-buf: 1\n", "sparse arrays: 1\n",
		"timeline semaphores: 1\n", "decompression: 3\n", "memory pools: 1\n", "host-native atomics: 1\n",
		"host atomic add: 0x1f\n"} {
		if local.code != 0 || !strings.Contains(local.stdout, want) {
			t.Fatalf("locally: exit %d, lacks %q\n%s%s", local.code, want, local.stdout, local.stderr)
		}
	}
	r := e.remote(e.serve("unix"), "families", "features")
	for _, want := range []string{"multicast: 0\n", "GPUDirect RDMA: 0\n", "dma-buf: 0\n", "sparse arrays: 0\n",
		"timeline semaphores: 0\n", "decompression: 0\n", "memory pools: 1\n", "host-native atomics: 0\n",
		"host atomic add: 0\n"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("remotely: exit %d, lacks %q\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
}

// The entry points of CUDA 2 to 4 that old programs' loaders insist on
// finding are exported; cuDeviceComputeCapability and cuDeviceGetProperties
// answer what the attributes say (as locally), the others
// CUDA_ERROR_NOT_SUPPORTED, said once.
func TestRemoteOldEntryPointsFound(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	r := e.remote(s, "families", "old")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	props := "cuDeviceGetProperties: CUDA_SUCCESS, 1024 threads a block (1024 1024 64), grid 2147483647 65535 65535, " +
		"49152 bytes shared, warp 32, clock 1500000 kHz, texture alignment 512; no device: CUDA_ERROR_INVALID_DEVICE\n"
	if local := e.run("families", "old"); !strings.Contains(local.stdout, props) {
		t.Errorf("locally: exit %d, lacks %q\n%s%s", local.code, props, local.stdout, local.stderr)
	}
	for _, want := range []string{"old entry points missing: 0\n", "cuDeviceComputeCapability: 9.0, attributes 9.0\n", props,
		"cuLaunchGrid: CUDA_ERROR_NOT_SUPPORTED\n", "cuLaunchGrid again: CUDA_ERROR_NOT_SUPPORTED\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stderr, "cuLaunchGrid is not supported remotely: the deprecated launch by parameters"); n != 1 {
		t.Errorf("the refusal was said %d times:\n%s", n, r.stderr)
	}
}

// A context's streams go with it, destroyed or reset (the simulated GPU
// crashed on such a stream before), and the executor forgets them with it:
// each transport answers as the GPU in the program's own process does, and
// as the driver does, with the context's fate, not as for a handle never
// made.
func TestRemoteStreamsGoWithTheirContext(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"families", "gone"},
		// as an H100's driver answers (2026-12-06)
		"a stream of a destroyed context: synchronize CUDA_ERROR_CONTEXT_IS_DESTROYED, destroy CUDA_ERROR_CONTEXT_IS_DESTROYED\n",
		"a stream of a reset primary context: synchronize CUDA_ERROR_INVALID_CONTEXT, destroy CUDA_ERROR_INVALID_CONTEXT\n",
		"a stream made after: synchronize CUDA_SUCCESS, destroy CUDA_SUCCESS\n",
	)
	sameRemotely(t, local, "families", "gone")
}

// An entry point the spec refuses, with its reason, is exported (a program
// using it loads) and answers CUDA_ERROR_NOT_SUPPORTED, said once.
func TestRemoteRefusedEntrySaidOnce(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	r := e.remote(s, "families", "refused")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"cuMulticastGetGranularity: CUDA_ERROR_NOT_SUPPORTED\n", "cuMulticastGetGranularity again: CUDA_ERROR_NOT_SUPPORTED\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stderr, "cuMulticastGetGranularity is not supported remotely: multicast objects are not carried"); n != 1 {
		t.Errorf("the refusal was said %d times:\n%s", n, r.stderr)
	}
}

// specNames are the driver entry points api/cuda.api and api/remote.api
// list (not the project's own operations, not the private tables' words).
func specNames(t *testing.T) []string {
	t.Helper()
	var names []string
	proto := regexp.MustCompile(`^\d+\s+(\w+)[\s(]`) // a prototype, or a refusal by name
	for _, f := range []string{"cuda.api", "remote.api"} {
		fh, err := os.Open(filepath.Join("..", "..", "api", f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || line[0] == '#' {
				continue
			}
			name := strings.Fields(line)[0]
			if m := proto.FindStringSubmatch(line); m != nil {
				name = m[1]
			}
			if strings.HasPrefix(name, "cu") {
				names = append(names, name)
			}
		}
		fh.Close()
	}
	return names
}

// Every driver entry point the spec lists is exported by the remoting
// libcuda.so.1 (a -lcuda program using it loads) and resolves through
// cuGetProcAddress_v2 at CUDA 13.0 (the runtime does not conclude the
// driver is too old), under flexgv run --remote; so does every function
// of CUDA 13.0's headers (api/cuda13.names) at its own version.
func TestRemoteExportsEverySpecEntry(t *testing.T) {
	names := specNames(t)
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, n := range []string{"cuProfilerStart", "cuProfilerStop", "cuStreamSetAttribute", "cuStreamGetAttribute",
		"cuOccupancyMaxPotentialBlockSize", "cuOccupancyMaxPotentialBlockSizeWithFlags",
		"cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyAvailableDynamicSMemPerBlock",
		"cuOccupancyMaxPotentialClusterSize", "cuOccupancyMaxActiveClusters", "cuCtxCreate_v4",
		"cuFuncGetAttribute", "cuFuncSetAttribute", "cuFuncSetCacheConfig", "cuCtxGetExecAffinity",
		"cuDeviceGetExecAffinitySupport", "cuTexObjectCreate", "cuMemExportToShareableHandle",
		"cuMemImportFromShareableHandle", "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2",
		"cuGLInit", "cuGreenCtxCreate", "cuTexRefSetArray", "cuIpcOpenMemHandle"} {
		if !have[n] {
			t.Errorf("%s is not in the spec", n)
		}
	}
	// And every function of the driver's headers resolves at the version
	// they give it, as a runtime built with them asks for it.
	headers, err := os.ReadFile(filepath.Join("..", "..", "api", "cuda13.names"))
	if err != nil {
		t.Fatal(err)
	}
	lines := append([]string(nil), names...)
	for _, l := range strings.Split(string(headers), "\n") {
		if f := strings.Fields(l); len(f) == 2 && !strings.HasPrefix(l, "#") {
			lines = append(lines, regexp.MustCompile(`_v[0-9]+$`).ReplaceAllString(f[1], "")+" "+f[0])
		}
	}
	e := newEnv(t)
	s := e.serve("unix")
	cmd := exec.Command(bin("flexgv"), "run", "--remote", s.addr, "--", bin("procnames"))
	cmd.Env = e.environ("")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	r := runCmd(t, cmd)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if len(lines) < len(names)+480 {
		t.Fatalf("only %d names of the driver's headers", len(lines)-len(names))
	}
	if want := fmt.Sprintf("checked %d missing 0\n", len(lines)); !strings.HasSuffix(r.stdout, want) {
		t.Errorf("want %q:\n%s", want, r.stdout)
	}
	// And nm sees them as a linker does.
	out, err := exec.Command("nm", "-D", "--defined-only", filepath.Join(build, "remote", "libcuda.so.1")).Output()
	if err != nil {
		t.Skipf("nm: %v", err)
	}
	exported := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[1] == "T" {
			exported[f[2]] = true
		}
	}
	for _, n := range names {
		if !exported[n] {
			t.Errorf("nm -D: %s is not exported", n)
		}
	}
}

// Pools of host memory: on the simulated GPU the host's current pool and
// one made hand out host memory the host writes. Remotely that memory
// would be the server's host's, out of the program's reach: allocations
// from such pools are refused and said once, never handed out to fault,
// while a device pool's still are.
func TestRemoteHostPools(t *testing.T) {
	e := newEnv(t)
	local := e.run("families", "hostpool")
	for _, want := range []string{"the host's current pool: CUDA_SUCCESS, host memory, read back; a copy down: CUDA_ERROR_INVALID_VALUE\n",
		"a pool of host memory made: CUDA_SUCCESS, host memory, read back; a copy down: CUDA_ERROR_INVALID_VALUE\n"} {
		if local.code != 0 || !strings.Contains(local.stdout, want) {
			t.Fatalf("locally: exit %d, want %q\n%s%s", local.code, want, local.stdout, local.stderr)
		}
	}
	for _, transport := range []string{"unix", "shm"} {
		r := e.remote(e.serveNamed(transport, transport), "families", "hostpool")
		for _, want := range []string{"the host's current pool: CUDA_ERROR_NOT_SUPPORTED\n",
			"a pool of host memory made: CUDA_ERROR_NOT_SUPPORTED\n",
			"the device's pool: CUDA_SUCCESS, device memory, read back\n"} {
			if r.code != 0 || !strings.Contains(r.stdout, want) {
				t.Errorf("over %s: exit %d, want %q\n%s%s", transport, r.code, want, r.stdout, r.stderr)
			}
		}
		if n := strings.Count(r.stderr, "a pool of host memory: the server's, which this process cannot reach"); n != 1 {
			t.Errorf("over %s: the refusal said %d times\n%s", transport, n, r.stderr)
		}
	}
}

// A remote program finds no video decoder library, even where the host's
// driver has one on the library path: the GPU's video and JPEG engines are
// not carried, and the driver's library, beside the remoting libcuda.so.1,
// waits for them forever (nvJPEG's hardware backend did on the H200).
func TestRemoteHasNoVideoDecoder(t *testing.T) {
	e := newEnv(t)
	// A host's own libnvcuvid.so.1, found after the remoting folder.
	host := filepath.Join(e.dir, "driver")
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(e.dir, "nvcuvid.c")
	if err := os.WriteFile(src, []byte("int cuvidGetDecoderCaps(void *caps) { (void)caps; return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-Wl,-soname,libnvcuvid.so.1", "-o",
		filepath.Join(host, "libnvcuvid.so.1"), src).CombinedOutput(); err != nil {
		t.Fatalf("building a stand-in driver library: %v\n%s", err, out)
	}
	local := e.runIn(filepath.Join(build, "sim")+":"+host, "families", "video")
	if local.code != 0 || !strings.Contains(local.stdout, "the video decoder's library: loaded\n") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	s := e.serve("unix")
	r := e.runIn(host, "flexgv", "run", "--remote", s.addr, "--", bin("families"), "video")
	want := "the video decoder's library: flexgv-remote-gpus-carry-no-video-engines.so: cannot open shared object file"
	if r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("remotely: exit %d, want %q\n%s%s", r.code, want, r.stdout, r.stderr)
	}
}

// What CuPy's own tests found a remote GPU answering otherwise than the
// driver: the type of pinned and registered host memory (which is the
// program's own, not the server's) and the plural call's answer for memory
// no one knows (H100, driver 580: the host pointer itself, device -2); a
// graph's debug print, written by the server's driver and read from the
// program's file; handles that look like the driver's pointers (a pool's
// handle was negative as a signed integer). Each transport prints what the
// GPU in the program's own process prints.
func TestRemotePointersMatchLocal(t *testing.T) {
	e := newEnv(t)
	local := e.run("families", "pointers")
	if local.code != 0 {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	for _, want := range []string{
		"cuMemHostAlloc: CUDA_SUCCESS, context the current, type 1, device pointer itself, host pointer itself, managed 0, ordinal 0; the type alone: CUDA_SUCCESS 1\n",
		"registered: CUDA_SUCCESS, context the current, type 1, device pointer itself, host pointer itself, managed 0, ordinal 0; the type alone: CUDA_SUCCESS 1\n",
		"managed: CUDA_SUCCESS, context the current, type 2, device pointer itself, host pointer itself, managed 1, ordinal 0",
		"pageable: CUDA_SUCCESS, context none, type 0, device pointer none, host pointer itself, managed 0, ordinal -2; the type alone: CUDA_ERROR_INVALID_VALUE 0\n",
		"a device pool made: CUDA_SUCCESS, an address, freed CUDA_SUCCESS, destroyed CUDA_SUCCESS\n",
		"a stream-ordered allocation's pool: CUDA_SUCCESS, the device's default\n",
		"cuGraphDebugDotPrint: CUDA_SUCCESS, with the kernel's name\n",
		"cuGraphDebugDotPrint verbose: CUDA_SUCCESS, with the kernel's name, longer than plain\n",
		"cuGraphDebugDotPrint into a folder that does not exist: CUDA_ERROR_OPERATING_SYSTEM, of no graph: CUDA_ERROR_INVALID_VALUE, to no path: CUDA_ERROR_INVALID_VALUE\n",
		"handles like the driver's pointers: all\n",
	} {
		if !strings.Contains(local.stdout, want) {
			t.Errorf("locally, lacks %q:\n%s", want, local.stdout)
		}
	}
	sameRemotely(t, local, "families", "pointers")
}
