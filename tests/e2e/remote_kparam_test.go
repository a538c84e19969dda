package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Kernel parameter layouts as the compiler wrote them (EIATTR_KPARAM_INFO,
// include/flexgv/cubin.h), from a cubin and a fatbinary nvcc 13.0 built of
// tests/data/kparam/kparams.cu: what cuobjdump -elf says of them.
func TestCubinLayouts(t *testing.T) {
	long(t)
	data := filepath.Join("..", "data", "kparam")
	want := ""
	for _, f := range []string{"kparams.cubin", "kparams.fatbin"} {
		want += f + ": none offsets sizes\n" + f + ": mixed offsets 0 8 48 56 sizes 1 40 2 8\n" +
			f + ": axpy offsets 0 8 16 24 sizes 4 8 8 4\n" + f + ": 3 kernel(s)\n"
	}
	// Compressed (zstd, by libzstd): the sm_90 cubin's kernels and the
	// sm_80 one's, or those a device runs.
	kernels := "kparams_compressed.fatbin: none offsets sizes\nkparams_compressed.fatbin: mixed offsets 0 8 48 56 sizes 1 40 2 8\n" +
		"kparams_compressed.fatbin: axpy offsets 0 8 16 24 sizes 4 8 8 4\n"
	want += kernels + kernels + "kparams_compressed.fatbin: 6 kernel(s)\n"
	e := newEnv(t)
	r := e.run("kparamdump", filepath.Join(data, "kparams.cubin"), filepath.Join(data, "kparams.fatbin"),
		filepath.Join(data, "kparams_compressed.fatbin"))
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, printed\n%s\nwant\n%s%s", r.code, r.stdout, want, r.stderr)
	}
	for _, arch := range []string{"90", "86", "75"} {
		want := kernels + "kparams_compressed.fatbin: 3 kernel(s)\n"
		if arch == "75" {
			want = "kparams_compressed.fatbin: 0 kernel(s)\n"
		}
		r := e.run("kparamdump", "--arch", arch, filepath.Join(data, "kparams_compressed.fatbin"))
		if r.code != 0 || r.stdout != want {
			t.Errorf("--arch %s: exit %d, printed\n%s\nwant\n%s%s", arch, r.code, r.stdout, want, r.stderr)
		}
	}
	// Images come from clients: every prefix and every byte changed end
	// the walk, nothing more; with the sanitizers where the compiler has
	// them, so that a read past the image fails the test.
	tool := bin("kparamdump")
	asan := filepath.Join(t.TempDir(), "kparamdump-asan")
	if out, err := exec.Command("cc", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
		"-I"+filepath.Join("..", "..", "include"), "-o", asan, filepath.Join("..", "clients", "kparamdump.c")).CombinedOutput(); err == nil {
		tool = asan
	} else {
		t.Logf("no sanitizers (%v: %s); the plain build walks the damaged images", err, out)
	}
	for _, f := range []string{"kparams.cubin", "kparams.fatbin", "kparams_compressed.fatbin"} {
		r := e.run(tool, "--mangle", filepath.Join(data, f))
		if r.code != 0 || !strings.HasPrefix(r.stdout, "walks ") {
			t.Errorf("%s damaged: exit %d %q\n%s", f, r.code, r.stdout, r.stderr)
		}
	}
}

// The simulated GPU loads a cubin's kernels with their layouts; the remote
// executor checks the driver's layouts against the cubins it loaded, says
// a kernel whose layouts differ (a module's kernel of the same name with
// other parameters stands in for a driver that disagrees), and says how
// many it checked when the connection ends.
func TestRemoteLayoutsCheckedAgainstCubins(t *testing.T) {
	long(t)
	for _, image := range []string{"kparams.cubin", "kparams_compressed.fatbin"} {
		t.Run(image, func(t *testing.T) { layoutsChecked(t, image) })
	}
}

// layoutsChecked loads image (a cubin, or a fatbinary whose cubins are
// compressed) and a module whose axpy takes other parameters.
func layoutsChecked(t *testing.T, image string) {
	cubin, err := filepath.Abs(filepath.Join("..", "data", "kparam", image))
	if err != nil {
		t.Fatal(err)
	}
	prog := contextPrelude + `
mod, f, dev = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(1 << 20)) == 0
def launch(image, name):
    assert cu.cuModuleLoadData(ctypes.byref(mod), image) == 0
    assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name) == 0
    n, o, s = 0, ctypes.c_size_t(), ctypes.c_size_t()
    while cu.cuFuncGetParamInfo(f, ctypes.c_size_t(n), ctypes.byref(o), ctypes.byref(s)) == 0:
        n += 1
    vals = [ctypes.c_uint64(dev.value) for _ in range(n)]
    params = (ctypes.c_void_p * n)(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
    print(name.decode(), n, "parameters, launch", cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, params, None), cu.cuCtxSynchronize())
launch(open(sys.argv[1], "rb").read(), b"axpy")
launch(b"FLEXGV-SIM-MODULE\nkernel axpy 10 params=2\n", b"axpy")
`
	want := "axpy 4 parameters, launch 0 0\naxpy 2 parameters, launch 0 0\n"
	e := newEnv(t)
	if r := e.run("python3", "-c", prog, cubin); r.code != 0 || r.stdout != want {
		t.Fatalf("locally: exit %d, printed\n%s\nwant\n%s%s", r.code, r.stdout, want, r.stderr)
	}
	for _, transport := range []string{"unix", "shm"} {
		e := newEnv(t)
		s := e.serve(transport)
		if r := e.remote(s, "python3", "-c", prog, cubin); r.code != 0 || r.stdout != want {
			t.Errorf("over %s: exit %d, printed\n%s\nwant\n%s%s", transport, r.code, r.stdout, want, r.stderr)
		}
		s.waitLog(`kernel axpy: the driver gives 2 parameter\(s\) \(8 8\), its cubin's EIATTR_KPARAM_INFO 4 \([0-9 ]+\)`, 10*time.Second)
		s.waitLog(`parameter layouts of 2 kernel\(s\) checked against their cubins' EIATTR_KPARAM_INFO: 1 differ`, 10*time.Second)
	}
}

// cubinOf is a minimal ELF cubin, written as nvcc lays one out, whose
// kernels each take one 4-byte parameter (Python source, for programs).
const cubinOf = `
import struct
def cubin(names, size=4):
    strtab = b"\0.shstrtab\0" + b"".join(b".nv.info." + n + b"\0" for n in names)
    rec = struct.pack("<BBHIHHI", 4, 0x17, 12, 0, 0, 0, size << 18)
    data, heads, at, name_at = b"", [], 64, 11
    heads.append(struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    heads.append(struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, at, len(strtab), 0, 0, 1, 0))
    data += strtab
    for n in names:
        heads.append(struct.pack("<IIQQQQIIQQ", name_at, 0x70000000, 0, 0, 64 + len(data), len(rec), 0, 0, 4, 0))
        data += rec
        name_at += len(b".nv.info." + n) + 1
    shoff = 64 + len(data)
    head = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 1, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(heads), 1)
    return head + data + b"".join(heads)
def fatbin(entries):  # (compute capability as 90, ELF cubin), uncompressed
    body = b"".join(struct.pack("<HHIQIIIIQQQQ", 2, 0x101, 64, len(e), 0, 0, 0x10008, arch, 0, 0x11, 0, 0) + e
                    for arch, e in entries)
    return struct.pack("<IHHQ", 0xba55ed50, 1, 16, len(body)) + body
`

// twoPointers starts a program with a context, cubinOf, mod and f to load
// into, and params: two pointer parameters, both a 64-byte allocation.
const twoPointers = contextPrelude + cubinOf + `
mod, f, dev = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(64)) == 0
v = ctypes.c_uint64(dev.value)
params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(v), ctypes.c_void_p), ctypes.cast(ctypes.byref(v), ctypes.c_void_p))
`

// A client whose images name many kernels that the driver lays out
// otherwise gets a bounded number of lines in the server's log, each
// name shown printable: the names are the client's.
func TestRemoteLayoutMismatchesBounded(t *testing.T) {
	prog := twoPointers + `
names = [b"evil\x1b[2J"] + [b"k%d" % i for i in range(20)]
for image in (cubin(names), b"FLEXGV-SIM-MODULE\n" + b"".join(b"kernel " + n + b" 10 params=2\n" for n in names) + b"\0"):
    assert cu.cuModuleLoadData(ctypes.byref(mod), image) == 0
    rs = set()
    for n in names:
        assert cu.cuModuleGetFunction(ctypes.byref(f), mod, n) == 0
        rs.add(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, params, None))
    print("launched", sorted(rs), cu.cuCtxSynchronize())
`
	e := newEnv(t)
	s := e.serve("unix")
	if r := e.remote(s, "python3", "-c", prog); r.code != 0 || r.stdout != "launched [0] 0\nlaunched [0] 0\n" {
		t.Fatalf("exit %d, printed\n%s%s", r.code, r.stdout, r.stderr)
	}
	s.waitLog(`parameter layouts of 42 kernel\(s\) checked against their cubins' EIATTR_KPARAM_INFO: 21 differ`, 10*time.Second)
	said := strings.Count(s.Log(), ": the driver gives 2 parameter(s) (8 8), its cubin's EIATTR_KPARAM_INFO 1 (4)")
	if said != 16 || !strings.Contains(s.Log(), "further kernels that differ are only counted") {
		t.Errorf("kernels said by name: %d, want 16 and a line that says the rest are counted:\n%s", said, s.Log())
	}
	if strings.Contains(s.Log(), "\x1b") || !strings.Contains(s.Log(), "kernel evil?[2J: the driver gives") {
		t.Errorf("a kernel's name reached the log unprintable:\n%q", s.Log())
	}
}

// A kernel name a text (PTX) image declares is not checked: the driver
// compiles that one, and which image's kernel of the name a launch runs is
// not known here.
func TestRemoteLayoutsOfTextImagesUnchecked(t *testing.T) {
	prog := twoPointers + `
assert cu.cuModuleLoadData(ctypes.byref(mod), cubin([b"k0", b"k1"])) == 0
cu.cuModuleLoadData(ctypes.byref(mod), b"//\n.version 8.0\n.target sm_90\n.visible .entry k0(\n.param .u64 a\n)\n{\nret;\n}\n\0")
assert cu.cuModuleLoadData(ctypes.byref(mod), b"FLEXGV-SIM-MODULE\nkernel k0 10 params=2\nkernel k1 10 params=2\n\0") == 0
for n in (b"k0", b"k1"):
    assert cu.cuModuleGetFunction(ctypes.byref(f), mod, n) == 0
    assert cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, params, None) == 0
print(cu.cuCtxSynchronize())
`
	e := newEnv(t)
	s := e.serve("unix")
	if r := e.remote(s, "python3", "-c", prog); r.code != 0 || r.stdout != "0\n" {
		t.Fatalf("exit %d, printed\n%s%s", r.code, r.stdout, r.stderr)
	}
	s.waitLog(`parameter layouts of 1 kernel\(s\) checked against their cubins' EIATTR_KPARAM_INFO: 1 differ`, 10*time.Second)
	if !strings.Contains(s.Log(), "kernel k1: the driver gives") || strings.Contains(s.Log(), "kernel k0:") {
		t.Errorf("k1 should be said and k0, which a text image declares too, not checked:\n%s", s.Log())
	}
}

// Of a fatbinary's cubins, the executor reads those the request context's
// device runs: here an sm_80 cubin whose kernel takes 8 bytes and an sm_90
// one whose kernel takes 4, on the simulated 9.0 device; read both, the
// name would be ambiguous and go unchecked.
func TestRemoteLayoutsOfTheDevicesArchitecture(t *testing.T) {
	prog := twoPointers + `
assert cu.cuModuleLoadData(ctypes.byref(mod), fatbin([(80, cubin([b"k0"], 8)), (90, cubin([b"k0"], 4))])) == 0
assert cu.cuModuleLoadData(ctypes.byref(mod), b"FLEXGV-SIM-MODULE\nkernel k0 10 params=2\n\0") == 0
assert cu.cuModuleGetFunction(ctypes.byref(f), mod, b"k0") == 0
print(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, params, None), cu.cuCtxSynchronize())
`
	e := newEnv(t)
	s := e.serve("unix")
	if r := e.remote(s, "python3", "-c", prog); r.code != 0 || r.stdout != "0 0\n" {
		t.Fatalf("exit %d, printed\n%s%s", r.code, r.stdout, r.stderr)
	}
	s.waitLog(`kernel k0: the driver gives 2 parameter\(s\) \(8 8\), its cubin's EIATTR_KPARAM_INFO 1 \(4\)`, 10*time.Second)
}
