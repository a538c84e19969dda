"""A Triton vector add on PyTorch tensors, compiled afresh (its own kernel
cache): prints whether it is right and the sum's bits; exit 1 if wrong."""
import os
import sys
import tempfile

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


n = 1 << 20
x = torch.arange(n, device="cuda", dtype=torch.float32)
out = torch.empty_like(x)
add[(triton.cdiv(n, 1024),)](x, 2 * x, out, n, BLOCK=1024)
torch.cuda.synchronize()
ok = torch.equal(out, 3 * x)
print("triton add:", "ok" if ok else "WRONG", float(out.sum().item()).hex())
sys.exit(0 if ok else 1)
