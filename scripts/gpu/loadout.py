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


def span(path):
    """(start, end), epoch seconds, of a load's windows or requests."""
    for f in lines(path):
        if len(f) == 3 and f[0] == "span":
            return float(f[1]), float(f[2])
    raise ValueError(f"{path}: no span line")


def rate_within(path, lo, hi):
    """Units a second over the windows wholly between epoch seconds lo and
    hi (while another load ran too); at least three, or no result."""
    t0, _ = span(path)
    w = [n for i, n in enumerate(windows(path)) if t0 + i >= lo and t0 + i + 1 <= hi]
    if len(w) < 3:
        raise ValueError(f"{path}: {len(w)} of its windows met the other load's work")
    return statistics.mean(w)


def latency(path):
    """(p50 ms, p99 ms, requests) of an inference run."""
    for f in lines(path):
        if len(f) == 4 and f[0] == "latency_ms":
            return float(f[1]), float(f[2]), int(f[3])
    raise ValueError(f"{path}: no latency_ms line")


def arrivals(path, lo, hi):
    """Each request of an inference run that arrived between epoch seconds
    lo and hi: (epoch second of its arrival, ms it took)."""
    t0, _ = span(path)
    for f in lines(path):
        if len(f) >= 2 and f[0] == "requests":
            rate = float(f[1])
            if not rate > 0:
                raise ValueError(f"{path}: a request rate of {f[1]}")
            return [(t0 + k / rate, float(ms)) for k, ms in enumerate(f[2:]) if lo <= t0 + k / rate < hi]
    raise ValueError(f"{path}: no requests line")


def latency_within(path, lo, hi):
    """(p50 ms, p99 ms, requests) of the requests of an inference run that
    arrived between epoch seconds lo and hi; at least 100."""
    lat = sorted(ms for _, ms in arrivals(path, lo, hi))
    if len(lat) < 100:
        raise ValueError(f"{path}: {len(lat)} of its requests met the other load's work")
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)], len(lat)


def behind(path, lo, hi, alone_p50):
    """The stretches of requests (arrived between epoch seconds lo and hi)
    behind their arrivals: from one over 3x alone_p50 (ms) while they stay
    over 2x; five requests at least. Each (epoch second of the first's
    arrival, requests, seconds, longest ms)."""
    lat = arrivals(path, lo, hi)
    out, i = [], 0
    while i < len(lat):
        if lat[i][1] <= 3 * alone_p50:
            i += 1
            continue
        j = i
        while j < len(lat) and lat[j][1] > 2 * alone_p50:
            j += 1
        if j - i >= 5:
            out.append((lat[i][0], j - i, lat[j - 1][0] - lat[i][0], max(ms for _, ms in lat[i:j])))
        i = j
    return out


def watch(path):
    """The region as region_dump.py --every sampled it: (epoch second,
    hand-overs so far, {tenant: ms lower priorities are kept off it})."""
    out = []
    for line in open(path):
        parts = line.split(" | ")
        head = parts[0].split()
        if len(head) != 5 or head[1] != "holder":
            continue
        try:  # a line cut short (the sampler ended) or garbled is left out
            off = {f[0]: float(f[4]) for f in (t.split() for t in parts[1:]) if len(f) == 5 and f[3] == "off"}
            out.append((float(head[0]), int(head[4]), off))
        except ValueError:
            continue
    return out


def slow(path):
    """The requests over 5x p50, by arrival: (seconds, ms)."""
    return [(float(f[1]), float(f[2])) for f in lines(path) if len(f) >= 3 and f[0] == "slow"]


def split(path):
    """A graph request's parts (launch, queued, gpu) as p50/p99 text, or ""."""
    for f in lines(path):
        if len(f) == 10 and f[0] == "split":
            return "; " + ", ".join(f"{f[i]} {f[i + 1]}/{f[i + 2]}" for i in (1, 4, 7)) + " ms p50/p99"
    return ""
