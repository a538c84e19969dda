"""Host-to-device copy bandwidth through PyTorch: 256 MiB from pageable and
from pinned host memory, best of 5; prints one JSON line (GB/s)."""
import json
import time

import torch

n = 256 << 20
out = {}
for kind in ("pageable", "pinned"):
    src = torch.ones(n, dtype=torch.uint8, pin_memory=(kind == "pinned"))
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    best = 0.0
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        best = max(best, n / (time.perf_counter() - t0) / 1e9)
    out[kind + "_gbps"] = best
    assert int(dst.sum().item()) == n
print(json.dumps(out))
