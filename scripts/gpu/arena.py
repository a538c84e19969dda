# What a program sees of device memory: cuMemAlloc's answers, small
# allocations sharing a page, device addresses the program's own memory
# cannot take, frees, running out, and a context taking its memory with it.
# Run remotely by tests/e2e/remote_arena_test.go (it must print
# tests/data/arena.out) and on a GPU by scripts/gpu-remote-cudart.sh,
# natively too.
import ctypes, errno
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
c = ctypes.c_uint64
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def alloc(n):
    p = c()
    return cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), p.value
def attr(a, p):
    v = c()
    r = cu.cuPointerGetAttribute(ctypes.byref(v), a, c(p))
    return v.value if r == 0 else "error %d" % r
def free_mem():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)) == 0
    return f.value, t.value
MiB = 1 << 20
r1, a = alloc(1000)
r2, b = alloc(1000)
r3, big = alloc(5 * MiB)
print("allocations", r1, r2, r3)
print("small ones share a page:", a >> 21 == b >> 21, a % 512, b % 512, "a large one starts one:", big % (2 * MiB))
base, size = c(), ctypes.c_size_t()
print("range inside:", cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), c(b + 10)), base.value == b, size.value)
print("attributes: start", attr(11, b + 10) == b, "size", attr(12, b + 10), "context", attr(1, b) == ctx.value,
      "type", attr(2, b), "ordinal", attr(9, b), "ids differ", attr(7, a) != attr(7, b))
print("past the allocation, in its page:", attr(11, b + 4096))
at = libc.mmap(b // 4096 * 4096, 4096, 3, 0x22 | 0x100000, -1, 0)  # MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED_NOREPLACE
print("the program's memory cannot land there:", at in (None, 2**64 - 1), errno.errorcode.get(ctypes.get_errno()))
src = (ctypes.c_ubyte * 1000)(*[i % 251 for i in range(1000)])
back = (ctypes.c_ubyte * 1000)()
assert cu.cuMemcpyHtoD_v2(c(b), src, ctypes.c_size_t(1000)) == 0
assert cu.cuMemcpyDtoD_v2(c(big + 3 * MiB), c(b), ctypes.c_size_t(1000)) == 0
assert cu.cuMemcpy(ctypes.c_uint64(ctypes.addressof(back)), c(big + 3 * MiB), ctypes.c_size_t(1000)) == 0
print("bytes through both:", bytes(back) == bytes(src))
print("free inside:", cu.cuMemFree_v2(c(a + 512)), "free:", cu.cuMemFree_v2(c(a)), "again:", cu.cuMemFree_v2(c(a)),
      "then:", attr(11, a))
f0, total = free_mem()
r, huge = alloc(total + MiB)
r4, d = alloc(1000)
print("more than the device:", r, "then:", r4)
ctx2 = ctypes.c_void_p()
assert cu.cuCtxCreate_v2(ctypes.byref(ctx2), 0, 0) == 0
f1, _ = free_mem()
r5, e = alloc(8 * MiB)
f2, _ = free_mem()
assert cu.cuCtxDestroy_v2(ctx2) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
f3, _ = free_mem()
print("a context's memory:", r5, (f1 - f2) // MiB, "MiB, back when it is destroyed:", f3 == f0, attr(11, e))
for p in (b, big, d):
    assert cu.cuMemFree_v2(c(p)) == 0
print("more free after the frees:", free_mem()[0] > f0)
