"""A tenant's process that joins its GPU's scheduler and then only waits:
another tenant's launches then take the path of a holder with others
present, with nobody waiting for the GPU.

    python3 scripts/gpu/idle_tenant.py SECONDS    (under flexgv run)

Prints "present" once it has joined."""
import ctypes
import sys
import time

cu = ctypes.CDLL("libcuda.so.1")
ctx, mem = ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(mem), 4096) == 0
assert cu.cuMemsetD8_v2(mem, 0, 4096) == 0  # a scheduled call: joins the scheduler
assert cu.cuCtxSynchronize() == 0
print("present", flush=True)
time.sleep(float(sys.argv[1]))
