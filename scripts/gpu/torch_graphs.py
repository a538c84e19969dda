"""CUDA graphs in PyTorch, deterministic, for diffing a native run against one
under the shim:
  1. a whole training step (forward, backward, optimizer step) captured with
     torch.cuda.graph over static inputs, then replayed on new data;
  2. the same model under torch.compile(mode="reduce-overhead"), which runs
     it through CUDA graph trees.
Prints every loss as an exact hex float and torch.cuda.max_memory_reserved
after each part.
    python3 torch_graphs.py [STEPS]
"""
import os
import sys
import traceback

# Before torch is imported: deterministic cuBLAS, and inductor compiling in
# this process (a pool of compile workers would be more processes in the
# tenant, and more start-up time).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

BATCH, DIM, BATCHES = 128, 256, 8


def make_model(dev):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(DIM, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10),
    ).to(dev)


def data(dev):
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(BATCHES, BATCH, DIM, generator=g).to(dev)
    ys = torch.randint(0, 10, (BATCHES, BATCH), generator=g).to(dev)
    return xs, ys


def show(part, losses):
    for i, l in enumerate(losses):
        print(f"{part} step {i} loss {float(l).hex()}")
    print(f"{part} max_memory_reserved {torch.cuda.max_memory_reserved()}")


def whole_step_graph(dev, xs, ys, steps):
    """The capture recipe of PyTorch's CUDA graphs notes: warm up on a side
    stream, capture one full step, then replay it with new data copied into
    the static inputs."""
    model = make_model(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    static_x, static_y = xs[0].clone(), ys[0].clone()
    losses = []
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(static_x), static_y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    # Let go of the last warm-up graph: its AccumulateGrad nodes belong to
    # the side stream, and capture would otherwise reuse them.
    del loss
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = loss_fn(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    for i in range(steps):
        static_x.copy_(xs[i % BATCHES])
        static_y.copy_(ys[i % BATCHES])
        graph.replay()
        losses.append(static_loss.item())
    show("graph", losses)


def compiled(dev, xs, ys, steps):
    model = make_model(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    cmodel = torch.compile(model, mode="reduce-overhead")
    losses = []
    for i in range(steps):
        # A new iteration: outputs of the previous graph replay may be reused.
        torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(cmodel(xs[i % BATCHES]), ys[i % BATCHES])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    show("compile", losses)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    dev = torch.device("cuda")
    xs, ys = data(dev)
    whole_step_graph(dev, xs, ys, steps)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    try:
        compiled(dev, xs, ys, steps)
    except Exception as e:  # noqa: BLE001 - reported, and the output then differs from a good run
        traceback.print_exc()
        print(f"compile failed: {type(e).__name__}")
        sys.exit(1)


if __name__ == "__main__":
    main()
