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
	data := filepath.Join("..", "data", "kparam")
	want := ""
	for _, f := range []string{"kparams.cubin", "kparams.fatbin"} {
		want += f + ": none offsets sizes\n" + f + ": mixed offsets 0 8 48 56 sizes 1 40 2 8\n" +
			f + ": axpy offsets 0 8 16 24 sizes 4 8 8 4\n" + f + ": 3 kernel(s)\n"
	}
	want += "kparams_compressed.fatbin: 0 kernel(s)\n" // its cubins are compressed: passed over
	e := newEnv(t)
	r := e.run("kparamdump", filepath.Join(data, "kparams.cubin"), filepath.Join(data, "kparams.fatbin"),
		filepath.Join(data, "kparams_compressed.fatbin"))
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, printed\n%s\nwant\n%s%s", r.code, r.stdout, want, r.stderr)
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
	for _, f := range []string{"kparams.cubin", "kparams.fatbin"} {
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
	cubin, err := filepath.Abs(filepath.Join("..", "data", "kparam", "kparams.cubin"))
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
		s.waitLog(`kernel axpy: the driver gives 2 parameter\(s\), its cubin's EIATTR_KPARAM_INFO 4`, 10*time.Second)
		s.waitLog(`parameter layouts of 2 kernel\(s\) checked against their cubins' EIATTR_KPARAM_INFO: 1 differ`, 10*time.Second)
	}
}
