"""DistributedDataParallel training over NCCL, one process per GPU:
    torchrun --standalone --nproc_per_node N ddp.py [--steps S] [--probe-gib G] [--rate]
Each rank trains a small MLP on its own deterministic data and prints one
"info" line (its device as seen from inside: mem_get_info). Rank 0 prints
every loss as "loss STEP HEX" (exact hex floats, so runs can be diffed).
With two ranks each all-reduced gradient is a+b, which rounds the same in
either order, so the losses are bit-identical from run to run.
--probe-gib G: after training, rank 0 tries to allocate G GiB and prints
"probe G GiB: ok" or "probe G GiB: OutOfMemoryError".
--rate: rank 0 also prints "rate STEPS_PER_S" of the training loop.
"""
import argparse
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

BATCH, DIM, BATCHES = 256, 512, 8


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--probe-gib", type=float, default=0)
    ap.add_argument("--rate", action="store_true")
    args = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    torch.use_deterministic_algorithms(True)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(DIM, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10),
    ).to(dev)
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.02, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(100 + rank)
    xs = torch.randn(BATCHES, BATCH, DIM, generator=g).to(dev)
    ys = torch.randint(0, 10, (BATCHES, BATCH), generator=g).to(dev)

    free, total = torch.cuda.mem_get_info(dev)
    print(f"info rank {rank}/{world}: cuda:{local} {torch.cuda.get_device_name(dev)} "
          f"mem_get_info total {total} free {free}", flush=True)

    losses = []
    torch.cuda.synchronize(dev)
    t0 = time.time()
    for i in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(xs[i % BATCHES]), ys[i % BATCHES])
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    torch.cuda.synchronize(dev)
    if rank == 0 and args.rate:
        print(f"rate {args.steps / (time.time() - t0):.1f}", flush=True)
    if rank == 0:
        for i, l in enumerate(torch.stack(losses).tolist()):
            print(f"loss {i} {float(l).hex()}")

    if args.probe_gib > 0 and rank == 0:
        try:
            t = torch.empty(int(args.probe_gib * (1 << 30)), dtype=torch.uint8, device=dev)
            t.fill_(1)
            torch.cuda.synchronize(dev)
            time.sleep(0.3)  # long enough for a 10 ms NVML sampler outside to see it
            del t
            result = "ok"
        except torch.OutOfMemoryError:
            result = "OutOfMemoryError"
        print(f"probe {args.probe_gib:g} GiB: {result}", flush=True)

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
