"""What scripts/gpu/share_load.py prints, read back: a load's windows and
rate, a request's latencies, its slow requests and where a graph request's
time went. Each function takes the output file's path."""
import statistics


def lines(path):
    with open(path) as f:
        return [line.split() for line in f]


def windows(path):
    """Each 1 s window's units of work."""
    return [float(f[2]) for f in lines(path) if len(f) == 3 and f[0] == "window"]


def rate(path):
    """Units a second, the first window (the start's stragglers) left out
    where there are more than two."""
    w = windows(path)
    return statistics.mean(w[1:] if len(w) > 2 else w)


def latency(path):
    """(p50 ms, p99 ms, requests) of an inference run."""
    for f in lines(path):
        if len(f) == 4 and f[0] == "latency_ms":
            return float(f[1]), float(f[2]), int(f[3])
    raise ValueError(f"{path}: no latency_ms line")


def slow(path):
    """The requests over 5x p50, by arrival: (seconds, ms)."""
    return [(float(f[1]), float(f[2])) for f in lines(path) if len(f) >= 3 and f[0] == "slow"]


def split(path):
    """A graph request's parts (launch, queued, gpu) as p50/p99 text, or ""."""
    for f in lines(path):
        if len(f) == 10 and f[0] == "split":
            return "; " + ", ".join(f"{f[i]} {f[i + 1]}/{f[i + 2]}" for i in (1, 4, 7)) + " ms p50/p99"
    return ""
