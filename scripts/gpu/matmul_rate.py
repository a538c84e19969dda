"""Matrix products per second on cuda:0 for SECONDS (default 4): the work of
a compute-bound tenant, to compare natively and under --compute-max."""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
a = torch.randn(4096, 4096, device="cuda")
b = torch.randn(4096, 4096, device="cuda")
for _ in range(20):
    a @ b
torch.cuda.synchronize()
n, t0 = 0, time.time()
while time.time() - t0 < seconds:
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    n += 10
print(f"{n / (time.time() - t0):.1f}")
