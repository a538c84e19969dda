package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a program sees of device memory whose addresses the client chose
// (remote/client/arena.c): scripts/gpu/arena.py prints tests/data/arena.out
// (on a GPU, natively too).
func TestRemoteClientChosenAddresses(t *testing.T) {
	long(t)
	e := newEnv(t)
	s := e.serve("unix")
	want, err := os.ReadFile(filepath.Join("..", "data", "arena.out"))
	prog, err2 := filepath.Abs(filepath.Join("..", "..", "scripts", "gpu", "arena.py"))
	if err != nil || err2 != nil {
		t.Fatal(err, err2)
	}
	r := e.remote(s, "python3", prog)
	if r.code != 0 || r.stdout != string(want) {
		t.Fatalf("exit %d, printed\n%s\nwant\n%s%s", r.code, r.stdout, want, r.stderr)
	}
}

// Small allocations after the first cost no round trip; frees do (they wait
// for the context, as cuMemFree does), and a context keeps one emptied page
// for its next ones. FLEXGV_REMOTE_ARENA=off leaves placement to the server.
func TestRemoteArenaRoundTrips(t *testing.T) {
	long(t)
	prog := contextPrelude + `
ps = []
for round in range(2):
    for i in range(100):
        p = ctypes.c_uint64()
        assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1024)) == 0
        ps.append(p.value)
    for p in ps:
        assert cu.cuMemFree_v2(ctypes.c_uint64(p)) == 0
    ps = []
print("ok")
`
	for _, c := range []struct {
		name, env                       string
		allocs, maps, frees, arenaFrees int
	}{
		{"chosen", "", 0, 1, 0, 200},
		{"off", "FLEXGV_REMOTE_ARENA=off", 200, 0, 200, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, "FLEXGV_REMOTE_LOG=calls", c.env)
			s := e.serve("unix")
			r := e.remote(s, "python3", "-c", prog)
			n := roundTrips(r)
			if r.code != 0 || r.stdout != "ok\n" || n["cuMemAlloc_v2"] != c.allocs || n["fgrArenaMap"] != c.maps ||
				n["cuMemFree_v2"] != c.frees || n["fgrArenaFree"] != c.arenaFrees {
				t.Errorf("exit %d, printed %q; round trips: cuMemAlloc_v2 %d fgrArenaMap %d cuMemFree_v2 %d fgrArenaFree %d, want %d %d %d %d\n%s",
					r.code, r.stdout, n["cuMemAlloc_v2"], n["fgrArenaMap"], n["cuMemFree_v2"], n["fgrArenaFree"],
					c.allocs, c.maps, c.frees, c.arenaFrees, r.stderr)
			}
		})
	}
	e := newEnv(t, "FLEXGV_REMOTE_ARENA=maybe")
	s := e.serve("unix")
	r := e.remote(s, "python3", "-c", prog)
	if r.code != 0 || strings.Count(r.stderr, "FLEXGV_REMOTE_ARENA is neither on, off nor a number of bytes") != 1 {
		t.Errorf("a bad FLEXGV_REMOTE_ARENA: exit %d, said\n%s", r.code, r.stderr)
	}
}

// An allocation the range has no room for (here a range of 64 MiB, set by
// FLEXGV_REMOTE_ARENA) is left to the server's driver rather than refused:
// the device has the memory.
func TestRemoteArenaFullFallsBack(t *testing.T) {
	long(t)
	e := newEnv(t, "FLEXGV_REMOTE_ARENA=67108864")
	s := e.serve("unix")
	prog := contextPrelude + `
c, MiB = ctypes.c_uint64, 1 << 20
ps = []
for i in range(3):
    p = c()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(30 * MiB)) == 0
    ps.append(p.value)
start = c()
print("in the range:", [cu.cuPointerGetAttribute(ctypes.byref(start), 11, c(p)) == 0 and start.value == p for p in ps],
      "apart:", ps[1] - ps[0] == 30 * MiB, abs(ps[2] - ps[0]) > 1 << 30)
assert cu.cuMemsetD8_v2(c(ps[2]), 7, ctypes.c_size_t(30 * MiB)) == 0
b = (ctypes.c_ubyte * 4)()
assert cu.cuMemcpyDtoH_v2(b, c(ps[2] + 30 * MiB - 4), ctypes.c_size_t(4)) == 0
print("bytes:", list(b), "frees:", [cu.cuMemFree_v2(c(p)) for p in ps])
`
	r := e.remote(s, "python3", "-c", prog)
	if want := "in the range: [True, True, True] apart: True True\nbytes: [7, 7, 7, 7] frees: [0, 0, 0]\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("exit %d, printed %q, want %q\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// The executor maps only inside the connection's range and over nothing
// already mapped, and checks device addresses by allocation, whatever a
// client asks (the operations are the client library's own exports,
// callable by anyone).
func TestRemoteArenaRefusals(t *testing.T) {
	long(t)
	e := newEnv(t)
	s := e.serve("unix")
	prog := contextPrelude + `
c = ctypes.c_uint64
p = c()
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4 << 20)) == 0
page = 2 << 20
small = c()
assert cu.cuMemAlloc_v2(ctypes.byref(small), ctypes.c_size_t(1000)) == 0
print("past a small one's end, in its page:", cu.cuMemcpyDtoH_v2(ctypes.create_string_buffer(20), c(small.value + 990), ctypes.c_size_t(20)))
print("said over it:", cu.fgrArenaNote(c(small.value + 512), ctypes.c_size_t(512)), "at the next sync:", cu.cuCtxSynchronize(),
      "then:", cu.cuCtxSynchronize(), "past its page:", cu.fgrArenaNote(c(small.value + page - 512), ctypes.c_size_t(1024)),
      cu.cuCtxSynchronize(), "between steps:", cu.fgrArenaNote(c(small.value + 4096 + 8), ctypes.c_size_t(8)),
      cu.cuCtxSynchronize())
print("over memory mapped:", cu.fgrArenaMap(c(p.value), ctypes.c_size_t(page)),
      "outside:", cu.fgrArenaMap(c(page), ctypes.c_size_t(page)),
      "unaligned:", cu.fgrArenaMap(c(p.value + 8 * page + 512), ctypes.c_size_t(page)),
      "free of nothing:", cu.fgrArenaFree(c(p.value + 64 * page), 1),
      "still works:", cu.cuMemsetD8_v2(p, 7, ctypes.c_size_t(4 << 20)), cu.cuMemFree_v2(p))
`
	r := e.remote(s, "python3", "-c", prog)
	want := `past a small one's end, in its page: 1
said over it: 0 at the next sync: 1 then: 0 past its page: 0 1 between steps: 0 1
over memory mapped: 1 outside: 1 unaligned: 1 free of nothing: 1 still works: 0 0
`
	if r.code != 0 || r.stdout != want {
		t.Fatalf("exit %d, printed %q, want %q\n%s", r.code, r.stdout, want, r.stderr)
	}
}
