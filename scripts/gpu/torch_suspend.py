"""Deterministic PyTorch training beside a ballast of device memory, for
flexgv suspend (scripts/gpu-e2e.sh suspend).

    python3 torch_suspend.py STEPS HOLD_GIB PROGRESS_FILE [graphed]

Fills HOLD_GIB GiB of device memory with a known pattern, then trains the
conv-net of torch_train.py for STEPS steps (with "graphed", each step the
replay of a CUDA graph captured once, after three steps on a side stream,
as torch.cuda.graph captures a whole training step), appending "STEP TIME" to
PROGRESS_FILE every 10 steps (TIME: time.time() once the step is done).
Prints one JSON line: every step's loss as an exact hex float, whether the
ballast still holds its pattern, the longest time between progress
lines (a suspension shows there), the time from the first to the last
and the CPU time and user-space instructions this process (every thread)
took meanwhile (instructions null where the kernel counts none for it).
"""
import ctypes
import json
import os
import resource
import struct
import sys
import time

import torch

from torch_train import setup  # this script's folder is on sys.path

MIB = 1 << 20


def instruction_counter():
    """A counter of the user-space instructions of this process's threads,
    those made from now on included (perf_event_open, inherited): a
    function that reads it, or None."""
    attr = bytearray(112)  # struct perf_event_attr, PERF_ATTR_SIZE_VER5
    struct.pack_into("IIQ", attr, 0, 0, len(attr), 1)  # PERF_TYPE_HARDWARE, its size, PERF_COUNT_HW_INSTRUCTIONS
    struct.pack_into("Q", attr, 40, (1 << 1) | (1 << 5) | (1 << 6))  # inherit, exclude_kernel, exclude_hv
    buf = ctypes.create_string_buffer(bytes(attr), len(attr))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # perf_event_open(attr, this process, any CPU, no group, no flags)
    fd = libc.syscall(ctypes.c_long(298), buf, *(ctypes.c_long(v) for v in (0, -1, -1, 0)))
    if fd < 0:
        return None
    return lambda: struct.unpack("Q", os.read(fd, 8))[0]


def main():
    steps, hold_gib, progress = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    count = instruction_counter()
    insns = []
    dev = torch.device("cuda")
    model, opt, x, y, loss_fn = setup(dev)
    block = (torch.arange(MIB, device=dev) % 251).to(torch.uint8)
    ballast = block.repeat(hold_gib * 1024).view(hold_gib * 1024, MIB)
    losses = []
    stamps = []
    cpus = []

    def eager():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    step = eager
    if len(sys.argv) > 4 and sys.argv[4] == "graphed":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                losses.append(eager())
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_fn(model(x), y)
            static_loss.backward()
            opt.step()

        def step():
            graph.replay()
            return static_loss.detach().clone()

    with open(progress, "a") as f:
        for i in range(len(losses), steps):
            losses.append(step())
            if i % 10 == 0:
                torch.cuda.synchronize()
                stamps.append(time.time())
                cpus.append(cpu_s())
                if count:
                    insns.append(count())
                f.write(f"{i} {stamps[-1]:.6f}\n")
                f.flush()
    torch.cuda.synchronize()
    intact = all(bool((ballast[i:i + 256] == block).all()) for i in range(0, ballast.shape[0], 256))
    gap = max((b - a for a, b in zip(stamps, stamps[1:])), default=0.0)
    print(json.dumps({"losses": [float(v).hex() for v in torch.stack(losses).tolist()], "ballast_intact": intact,
                      "ballast_bytes": ballast.numel(), "max_gap_s": gap,
                      "train_s": stamps[-1] - stamps[0] if stamps else 0.0, "train_cpu_s": cpus[-1] - cpus[0] if cpus else 0.0,
                      "train_instructions": insns[-1] - insns[0] if insns else None}))


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


if __name__ == "__main__":
    main()
