"""Copy bandwidth through PyTorch: 256 MiB host to device from pageable and
from pinned host memory, then device to host into each, best of 5; prints
one JSON line (GB/s)."""
import json
import time

import torch

n = 256 << 20


def best(dst, src):
    """GB/s of the fastest of 5 copies of src into dst."""
    top = 0.0
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        top = max(top, n / (time.perf_counter() - t0) / 1e9)
    return top


out = {}
for kind in ("pageable", "pinned"):
    src = torch.ones(n, dtype=torch.uint8, pin_memory=(kind == "pinned"))
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    out[kind + "_gbps"] = best(dst, src)
    assert int(dst.sum().item()) == n
for kind in ("pageable", "pinned"):
    src = torch.full((n,), 7, dtype=torch.uint8, device="cuda")
    dst = torch.empty(n, dtype=torch.uint8, pin_memory=(kind == "pinned"))
    out["d2h_" + kind + "_gbps"] = best(dst, src)
    assert int(dst[:4096].sum()) == 7 * 4096 and int(dst[-1]) == 7
print(json.dumps(out))
