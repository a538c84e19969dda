"""Reads what scripts/gpu-matrix.sh wrote in DIR and prints its tables
(Markdown, for docs/MEASUREMENTS.md), also written to DIR/matrix.md, with
an SVG a priority pair under DIR/svg/. Each figure is the median over
rounds of a ratio taken within one round (a load against itself alone in
the same round). Exits 1 when a run has no result.

    matrix_report.py DIR

A pair's figures are of the time both its loads ran (one whose setup
outlasted the other's starts late): a load's windows and requests
outside it are left out.

Shares: A at 30 % beside B at 70 %, each one's rate over its rate alone.
A share is a floor: where the pair leaves the GPU room (together over
100 % of their alone rates) a tenant past its share is no error; otherwise
the error is the distance to the share. flexgv's target: a mean error
≤ 2 pp with the pair together ≥ 0.97 of what time-slicing gives it.
Priority: a request's p50 and p99 over its own alone (requests at a
fraction of their peak rate, runs/rate.txt, or at the rate given,
runs/peak/REQUEST.txt without a .peak beside it), and the trainer's
rate over its alone. flexgv's target: p50 and p99 no worse than
time-slicing's with the trainer ≥ 0.9 of what time-slicing leaves it;
under MPS, p99 ≤ 1.10× alone with the trainer ≥ 0.75.
Then, under flexgv, each stretch of requests behind their arrivals, with
what the scheduler's region (the pair's watch.txt) shows at its start.
"""
import glob
import math
import os
import statistics
import sys

import loadout

LABELS = {"timeslice": "time-slicing", "flexgv": "flexgv", "mps": "MPS",
          "mpsthreads": "MPS, thread limits", "mpsflexgv": "flexgv under MPS"}
SHARES = (30, 70)

d = sys.argv[1]
runs = os.path.join(d, "runs")
bad = []


def result(path, what):
    """what(path), or None (and the run counted bad) when it has none."""
    try:
        return what(path)
    except (OSError, ValueError, statistics.StatisticsError):
        bad.append(os.path.relpath(path, d))
        return None


def alone(load, rnd, what):
    """A load's figures alone in round rnd; a load that did no work alone is
    no result (nothing to divide by)."""
    path = os.path.join(runs, "alone", load, f"{rnd}.txt")
    v = result(path, what)
    if v == 0:
        bad.append(os.path.relpath(path, d))
        return None
    return v


def pairs(kind):
    """(A, B, {mechanism: [round, ...]}) of each pair run."""
    out = []
    for p in sorted(glob.glob(os.path.join(runs, kind, "*+*"))):
        a, b = os.path.basename(p).split("+", 1)
        mechs = {m: sorted(os.listdir(os.path.join(p, m))) for m in LABELS if os.path.isdir(os.path.join(p, m))}
        out.append((a, b, mechs))
    return out


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def share_error(got):
    """Mean error of a pair's shares (A's, B's) against 30/70 (see above)."""
    room = sum(got) > 100
    errs = [max(0.0, want - g) if room else abs(g - want) for g, want in zip(got, SHARES)]
    return statistics.mean(errs)


def medians(kind, a, b, mechs, one):
    """{mechanism: the median over rounds of each figure one(run's folder,
    round) gives}, rounds without a result left out."""
    cells = {}
    for m, rounds in mechs.items():
        per = [one(os.path.join(runs, kind, f"{a}+{b}", m, r), r) for r in rounds]
        per = [p for p in per if p is not None]
        if per:
            cells[m] = tuple(median(p[i] for p in per) for i in range(len(per[0])))
    return cells


def together(*paths):
    """(lo, hi): while each of the pair's loads ran (their setups may end
    apart: a load's windows or requests before the other's start count
    alone); None (the run counted bad) when a load says no span."""
    spans = [result(p, loadout.span) for p in paths]
    if None in spans:
        return None
    return max(s[0] for s in spans), min(s[1] for s in spans)


def within(what, lo_hi):
    """what(path, lo, hi) for a result() over the pair's time together."""
    return lambda path: what(path, *lo_hi)


def shares(a, b):
    def one(base, r):
        pa, pb = os.path.join(base, "a.txt"), os.path.join(base, "b.txt")
        both = together(pa, pb)
        if both is None:
            return None
        got = [result(pa, within(loadout.rate_within, both)), result(pb, within(loadout.rate_within, both)),
               alone(a, r, loadout.rate), alone(b, r, loadout.rate)]
        return None if None in got else (100 * got[0] / got[2], 100 * got[1] / got[3])
    return one


def grows(cell):
    """Whether a request's queue grew without bound: its p50 ten times
    its alone at least (a request that keeps up waits for a few others
    at most)."""
    return cell[0] >= 10


def priority(a, b):
    def one(base, r):
        pq, pt = os.path.join(base, "req.txt"), os.path.join(base, "trn.txt")
        both = together(pq, pt)
        if both is None:
            return None
        got = [result(pq, within(loadout.latency_within, both)), result(pt, within(loadout.rate_within, both)),
               alone(a, r, loadout.latency), alone(b, r, loadout.rate)]
        if None in got:
            return None
        (p50, p99, _), rt, (a50, a99, _), ta = got
        return p50 / a50, p99 / a99, rt / ta
    return one


lines = []
# Shares
share_rows = [(a, b, medians("share", a, b, mechs, shares(a, b)), mechs) for a, b, mechs in pairs("share")]
if share_rows:
    lines.append("Shares: A at 30 % beside B at 70 %; each one's rate ÷ its rate alone (A / B, together; error against 30/70)\n")
    lines.append("| A / B | " + " | ".join(LABELS.values()) + " | flexgv's target |")
    lines.append("| --- |" + " --- |" * (len(LABELS) + 1))
    for a, b, cells, ran in share_rows:
        row, verdict = [], ""
        for m in LABELS:
            c = cells.get(m)
            if not c:
                row.append("no result" if m in ran else "—")
                continue
            text = f"{c[0]:.1f} / {c[1]:.1f} ({sum(c):.0f} %)"
            if m in ("flexgv", "mpsthreads", "mpsflexgv"):
                text += f", error {share_error(c):.1f} pp"
            row.append(text)
        f, t = cells.get("flexgv"), cells.get("timeslice")
        if f and t:
            ratio = sum(f) / sum(t)
            met = share_error(f) <= 2 and ratio >= 0.97
            verdict = f"{'met' if met else 'missed'}: error {share_error(f):.1f} pp, together {ratio:.2f} of time-slicing's"
        lines.append(f"| {a} / {b} | " + " | ".join(row) + f" | {verdict} |")
    lines.append("")

# Priority
prio_rows = [(a, b, medians("priority", a, b, mechs, priority(a, b)), mechs) for a, b, mechs in pairs("priority")]
svgs = {f"{a}+{b}": cells for a, b, cells, _ in prio_rows}
if prio_rows:
    try:
        with open(os.path.join(runs, "rate.txt")) as f:
            rate = f"{float(f.read()):g} of its peak rate"
    except (OSError, ValueError):
        rate = "half its peak rate"
    # a request rate given (MATRIX_PER_S) has no peak measured beside it
    fixed = []
    for a in sorted({a for a, _, _, _ in prio_rows}):
        try:
            with open(os.path.join(runs, "peak", a + ".txt")) as f:
                per_s = float(f.read())
        except (OSError, ValueError):
            continue
        if not os.path.exists(os.path.join(runs, "peak", a + ".peak")):
            fixed.append(f"{a} at {per_s:g}/s")
    if fixed:
        rate += " (" + ", ".join(fixed) + ", as given)"
    lines.append(f"Priority: a request (high) at {rate} beside a trainer (low); the request's p50 and p99 "
                 "÷ its own alone, the trainer's rate ÷ its alone\n")
    lines.append("| request / trainer | " + " | ".join(LABELS.values()) + " | flexgv's targets |")
    lines.append("| --- |" + " --- |" * (len(LABELS) + 1))
    for a, b, cells, ran in prio_rows:
        row = []
        for m in LABELS:
            c = cells.get(m)
            if not c:
                row.append("no result" if m in ran else "—")
            elif grows(c):
                row.append(f"grows (p50 {c[0]:.0f}×); trainer {c[2]:.2f}")
            else:
                row.append(f"p50 {c[0]:.2f}×, p99 {c[1]:.2f}×; trainer {c[2]:.2f}")
        verdicts = []
        f, t, mf = cells.get("flexgv"), cells.get("timeslice"), cells.get("mpsflexgv")
        if f and t:
            met = f[0] <= t[0] and f[1] <= t[1] and f[2] >= 0.9 * t[2]
            latency = ("time-slicing lets the request's queue grow" if grows(t) and not grows(f)
                       else f"p50 {f[0] / t[0]:.2f}, p99 {f[1] / t[1]:.2f}")
            verdicts.append(f"{'met' if met else 'missed'}: {latency}, trainer {f[2] / t[2]:.2f} of time-slicing's")
        if mf:
            met = mf[1] <= 1.10 and mf[2] >= 0.75
            verdicts.append(f"under MPS {'met' if met else 'missed'}: p99 {mf[1]:.2f}×, trainer {mf[2]:.2f}")
        lines.append(f"| {a} / {b} | " + " | ".join(row) + " | " + "; ".join(verdicts) + " |")
    lines.append("")

# Where flexgv's requests fell behind their arrivals: each stretch, and
# what the scheduler's region (watch.txt) shows at its start: a look
# (lower priorities newly kept from running beside, within 0.3 s), and
# the hand-overs while it lasted (none: the holder never paused).
stretches = []
for a, b, _, mechs in prio_rows:
    for m in ("flexgv", "mpsflexgv"):
        for r in mechs.get(m, []):
            base = os.path.join(runs, "priority", f"{a}+{b}", m, r)
            pq, pt, pw = (os.path.join(base, n) for n in ("req.txt", "trn.txt", "watch.txt"))
            both = together(pq, pt)
            solo = alone(a, r, loadout.latency)
            if both is None or solo is None:
                continue
            got = result(pq, lambda p: loadout.behind(p, *both, solo[0]))
            if not got:
                continue
            t0 = both[0]
            seen = loadout.watch(pw) if os.path.exists(pw) else []
            told = []
            for at, n, secs, worst in got:
                text = f"at {at - t0:.2f} s, {n} requests over {secs:.2f} s (up to {worst:.0f} ms)"
                near = [w for w in seen if at - 0.3 <= w[0] <= at + 0.3]
                if seen:
                    before = [w for w in seen if w[0] < at - 0.3]
                    was = before[-1][2] if before else {}
                    looked = any(ms > was.get(t, 0) + 300 for w in near for t, ms in w[2].items())
                    during = [w[1] for w in seen if at <= w[0] <= at + secs]
                    text += (", a look beside at its start" if looked else "") + \
                        (f", {during[-1] - during[0]} hand-overs meanwhile" if len(during) > 1 else "")
                told.append(text)
            stretches.append(f"- {a} / {b}, {LABELS[m]}, round {r}: " + "; ".join(told))
if stretches:
    lines.append("Where flexgv's requests fell behind their arrivals (over 3× alone's p50, while over 2×; "
                 "five requests at least), seconds from the pair's start\n")
    lines.extend(stretches)
    lines.append("")


def svg(name, cells):
    """p99 ÷ alone (log scale) against the trainer's rate ÷ alone, one point
    a way of sharing."""
    w, h, left, bottom, top, right = 520, 340, 60, 40, 30, 150
    ys = [c[1] for c in cells.values()] + [1.0]
    lo, hi = math.log10(min(ys) / 1.1), math.log10(max(ys) * 1.1)
    x = lambda v: left + v * (w - left - right)
    y = lambda v: top + (hi - math.log10(v)) / (hi - lo) * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="13">{name.replace("+", " beside ")}: p99 ÷ alone against the trainer kept</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<text x="{x(v):.1f}" y="{h - bottom + 14}" text-anchor="middle">{v:.2f}</text>')
    last = None  # the last tick drawn: ticks closer than a label's height are left out
    for v in (1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 100, 1000, 10000):
        if lo <= math.log10(v) <= hi and (last is None or last - y(v) >= 14):
            last = y(v)
            out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v}×</text>')
    out.append(f'<text x="{(left + w - right) / 2:.0f}" y="{h - 6}" text-anchor="middle">trainer\'s rate ÷ alone</text>')
    colors = {"timeslice": "#666", "flexgv": "#d62728", "mps": "#1f77b4", "mpsthreads": "#17becf", "mpsflexgv": "#ff7f0e"}
    for i, (m, c) in enumerate((m, cells[m]) for m in LABELS if m in cells):
        out.append(f'<circle cx="{x(min(max(c[2], 0), 1.05)):.1f}" cy="{y(c[1]):.1f}" r="5" fill="{colors[m]}"/>')
        out.append(f'<circle cx="{w - right + 14}" cy="{top + 10 + 16 * i}" r="5" fill="{colors[m]}"/>')
        out.append(f'<text x="{w - right + 24}" y="{top + 14 + 16 * i}">{LABELS[m]}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if svgs:
    os.makedirs(os.path.join(d, "svg"), exist_ok=True)
    for name, cells in svgs.items():
        if cells:
            with open(os.path.join(d, "svg", f"priority-{name}.svg"), "w") as f:
                f.write(svg(name, cells))
if bad:
    lines.append("Runs without a result: " + ", ".join(sorted(set(bad))))
text = "\n".join(lines) + "\n"
with open(os.path.join(d, "matrix.md"), "w") as f:
    f.write(text)
print(text, end="")
sys.exit(1 if bad else 0)
