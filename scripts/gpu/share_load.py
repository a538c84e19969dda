"""One tenant's GPU work for the compute-sharing benchmark, on cuda:0.

    share_load.py matmul SECONDS [START]     matrix products; prints "window T N"
                                             every second (N products in it)
    share_load.py conv SECONDS [START]       a small convolutional network's training
                                             (32x32 images, batch 128); prints
                                             "window T STEPS" every second
    share_load.py train SECONDS [START [BATCH]]  a small transformer training loop
                                             (BATCH sequences a step, default 32);
                                             prints "window T STEPS" every second,
                                             then "slowstep END MS" for steps over
                                             3x the median
    share_load.py infer RATE SECONDS [START] batch-1 inference of a small
                                             transformer, requests every 1/RATE s;
                                             prints "requests RATE MS..." (each
                                             latency, by arrival), "latency_ms
                                             P50 P99 N", then
                                             "slow T MS at EPOCH ..." for requests
                                             over 5x p50 (graphs: where it waited,
                                             and "split" with the p50/p99 of each part)
    share_load.py peak SECONDS               inference requests back to back;
                                             prints their rate
    infer-graph, peak-graph                  the same, each request one CUDA graph
                                             replay of a longer input, as servers
                                             do: GPU time, not Python, is its cost

START is a wall-clock time (epoch seconds) to wait for after warming up, so
that tenants started one after another measure the same seconds, or
wait:DIR:OFFSET (gpu-matrix.sh): once set up, say so in DIR and start
OFFSET seconds after the time the script then writes to DIR/go. Each
load except peak ends with "span START END": when its measured seconds
or requests began and ended.
"""
import os
import sys
import time

import torch

torch.manual_seed(0)
dev = "cuda"


def wait_start(start):
    """Waits for start: an epoch second, or wait:DIR:OFFSET, OFFSET seconds
    after the epoch second gpu-matrix.sh writes to DIR/go once every load
    of the pair has said it is set up (DIR/ready.PID)."""
    torch.cuda.synchronize()
    if isinstance(start, str):
        _, d, offset = start.split(":")
        open(os.path.join(d, f"ready.{os.getpid()}"), "w").close()
        go = os.path.join(d, "go")
        while not os.path.exists(go):
            time.sleep(0.005)
        with open(go) as f:
            start = float(f.read()) + float(offset)
    if start:
        time.sleep(max(0.0, start - time.time()))


def windows(step, seconds, start):
    """Runs step() (returns units of work done) for seconds, printing each
    second's units, then when the first began and the last ended (epoch
    seconds): a load that starts late (its setup outlasted the others')
    meets the others' work in part of its windows only."""
    wait_start(start)
    t0 = time.time()
    w, n = 0, 0
    while True:
        n += step()
        now = time.time()
        if now - t0 >= (w + 1):
            print(f"window {w} {n}", flush=True)
            w, n = w + 1, 0
            if w >= seconds:
                print(f"span {t0:.3f} {t0 + w:.3f}", flush=True)
                return


def matmul(seconds, start):
    a = torch.randn(4096, 4096, device=dev)
    b = torch.randn(4096, 4096, device=dev)
    for _ in range(20):
        a @ b

    def step():
        for _ in range(5):
            a @ b
        torch.cuda.synchronize()
        return 5

    windows(step, seconds, start)


def conv(seconds, start):
    c = torch.nn
    m = c.Sequential(c.Conv2d(3, 64, 3, padding=1), c.BatchNorm2d(64), c.ReLU(),
                     c.Conv2d(64, 128, 3, padding=1), c.BatchNorm2d(128), c.ReLU(), c.MaxPool2d(2),
                     c.Conv2d(128, 256, 3, padding=1), c.BatchNorm2d(256), c.ReLU(), c.MaxPool2d(2),
                     c.Conv2d(256, 256, 3, padding=1), c.BatchNorm2d(256), c.ReLU(),
                     c.AdaptiveAvgPool2d(1), c.Flatten(), c.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(128, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (128,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        loss.item()
        return 1

    for _ in range(5):
        step()
    windows(step, seconds, start)


def model():
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=6).to(dev)


def train(seconds, start, batch=32):
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    x = torch.randn(batch, 256, 512, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        loss.item()  # one synchronization per step, as training loops log
        return 1

    for _ in range(5):
        step()
    ends = []

    def timed():
        step()
        ends.append(time.time())
        return 1
    windows(timed, seconds, start)
    # Steps over 3x the median, by their end (epoch seconds): what the
    # trainer was doing when another tenant stalled.
    d = sorted(b - a for a, b in zip(ends, ends[1:]))
    if d:
        med = d[len(d) // 2]
        for a, b in zip(ends, ends[1:]):
            if b - a > 3 * med:
                print(f"slowstep {b:.3f} {(b - a) * 1000:.1f}")


def infer_setup(graph):
    """Returns one request: the model's forward pass, synchronized."""
    m = model().eval()
    x = torch.randn(1, 512 if graph else 128, 512, device=dev)
    with torch.inference_mode():
        for _ in range(20):
            m(x)
    torch.cuda.synchronize()
    if not graph:
        def request():
            with torch.inference_mode():
                m(x)
            torch.cuda.synchronize()
        return request
    g = torch.cuda.CUDAGraph()
    with torch.inference_mode():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                m(x)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            m(x)

    def replay():
        g.replay()
        torch.cuda.synchronize()
    for _ in range(20):
        replay()
    replay.graph = g
    return replay


def infer(rate, seconds, start, graph):
    request = infer_setup(graph)
    wait_start(start)
    # Where a slow request's time went: each graph replay is split into
    # launching (the host call, where a scheduler would hold it), waiting
    # for the GPU to start it, and running on the GPU, from timing events
    # around it read against one recorded at the start.
    g = getattr(request, "graph", None)
    base = torch.cuda.Event(enable_timing=True)
    marks = []
    lat = []
    base.record()
    base.synchronize()
    t_base = t0 = time.time()
    k = 0
    while True:
        due = t0 + k / rate
        if due - t0 >= seconds:
            break
        now = time.time()
        if now < due:
            time.sleep(due - now)
        if g is None:
            request()
        else:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begun = time.time()
            a.record()
            g.replay()
            launched = time.time()
            b.record()
            torch.cuda.synchronize()
            marks.append((begun, launched, a, b))
        lat.append((time.time() - due) * 1000)  # from its arrival, queueing included
        k += 1
    print(f"span {t0:.3f} {time.time():.3f}", flush=True)  # when its requests came
    # each request's latency, by arrival (request k at t0 + k / rate): those
    # that met another load's work are read out of them
    print("requests", f"{rate:.6f}", " ".join(f"{ms:.3f}" for ms in lat), flush=True)
    by_time = list(lat)
    lat.sort()
    p50 = lat[len(lat) // 2]
    print(f"latency_ms {p50:.3f} {lat[int(len(lat) * 0.99)]:.3f} {len(lat)}", flush=True)
    if marks:  # each part's p50 and p99 over all requests
        parts = {"launch": [], "queued": [], "gpu": []}
        for begun, launched, a, b in marks:
            parts["launch"].append((launched - begun) * 1000)
            parts["queued"].append((t_base + base.elapsed_time(a) / 1000 - launched) * 1000)
            parts["gpu"].append(a.elapsed_time(b))
        line = "split"
        for name, xs in parts.items():
            xs.sort()
            line += f" {name} {xs[len(xs) // 2]:.3f} {xs[int(len(xs) * 0.99)]:.3f}"
        print(line, flush=True)
    # The slow requests, by arrival (seconds from the start): where a stall
    # is; with graphs, also ms to launch, from launch to the GPU starting it,
    # and on the GPU.
    slow = [i for i, ms in enumerate(by_time) if ms > 5 * p50]
    for i in slow[:50]:
        line = f"slow {i / rate:.3f} {by_time[i]:.3f} at {t0 + i / rate:.3f}"
        if marks:
            begun, launched, a, b = marks[i]
            started = t_base + base.elapsed_time(a) / 1000
            line += (f" launch {(launched - begun) * 1000:.3f} queued {(started - launched) * 1000:.3f}"
                     f" gpu {a.elapsed_time(b):.3f}")
        print(line)


def peak(seconds, graph):
    request = infer_setup(graph)
    t0, n = time.time(), 0
    while time.time() - t0 < seconds:
        request()
        n += 1
    print(f"{n / (time.time() - t0):.1f}")


if __name__ == "__main__":
    mode, args = sys.argv[1], [a if a.startswith("wait:") else float(a) for a in sys.argv[2:]]
    if mode == "matmul":
        matmul(int(args[0]), args[1] if len(args) > 1 else 0)
    elif mode == "conv":
        conv(int(args[0]), args[1] if len(args) > 1 else 0)
    elif mode == "train":
        train(int(args[0]), args[1] if len(args) > 1 else 0, int(args[2]) if len(args) > 2 else 32)
    elif mode in ("infer", "infer-graph"):
        infer(args[0], args[1], args[2] if len(args) > 2 else 0, mode == "infer-graph")
    elif mode in ("peak", "peak-graph"):
        peak(args[0], mode == "peak-graph")
    else:
        sys.exit(f"unknown mode {mode}")
