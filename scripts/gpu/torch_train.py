"""A small, deterministic PyTorch conv-net training loop.

Prints one JSON line: the loss of every step (as exact hex floats, so runs
can be compared bit for bit) and the steps per second of the timed part.
    python3 torch_train.py STEPS [WARMUP]
"""
import json
import sys
import time

import torch
import torch.nn as nn


def setup(dev):
    """The seeded, deterministic model, optimizer, batch and loss on dev
    (also torch_suspend.py's): (model, opt, x, y, loss_fn)."""
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AvgPool2d(8), nn.Flatten(), nn.Linear(64 * 16, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(64, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dev)
    y = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(2)).to(dev)
    return model, opt, x, y, nn.CrossEntropyLoss()


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    model, opt, x, y, loss_fn = setup(torch.device("cuda"))
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        losses.append(step().item())
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    timed = [step() for _ in range(steps)]
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    losses += [l.item() for l in timed]
    print(json.dumps({"losses": [float(l).hex() for l in losses], "steps_per_s": steps / dt}))


if __name__ == "__main__":
    main()
