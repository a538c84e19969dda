"""PyTorch inside a memory quota: what the framework sees and gets.

    torch_quota.py fill              mem_get_info, then 256 MiB tensors until OutOfMemoryError
    torch_quota.py hold GIB FILE     allocate GIB, touch FILE, wait until FILE is removed
    torch_quota.py try GIB [GIB...]  try each allocation in turn, report which succeed
Prints one JSON line.
"""
import json
import os
import sys
import time

import torch

MiB = 1 << 20


def main():
    mode = sys.argv[1]
    free, total = torch.cuda.mem_get_info()
    out = {"mode": mode, "total": total, "free_start": free}
    if mode == "fill":
        blocks = []
        try:
            while True:
                blocks.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            out["oom"] = True
        out["allocated"] = len(blocks) * 256 * MiB
        out["free_end"] = torch.cuda.mem_get_info()[0]
    elif mode == "hold":
        keep = torch.empty(int(float(sys.argv[2]) * 1024) * MiB, dtype=torch.uint8, device="cuda")
        open(sys.argv[3], "w").close()
        while os.path.exists(sys.argv[3]):
            time.sleep(0.05)
        out["held"] = keep.numel()
    elif mode == "try":
        out["results"] = []
        keep = []
        for g in sys.argv[2:]:
            try:
                keep.append(torch.empty(int(float(g) * 1024) * MiB, dtype=torch.uint8, device="cuda"))
                out["results"].append([g, "ok"])
            except torch.OutOfMemoryError:
                out["results"].append([g, "OutOfMemoryError"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
