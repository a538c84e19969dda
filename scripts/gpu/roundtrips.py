"""The round trips a remote program made per unit of work, from two runs
that differ only in how many units they did, each with
FLEXGV_REMOTE_LOG=calls (the client's counts at exit):

    roundtrips.py FEWER.out MORE.out UNITS LABEL UNIT

UNITS is how many more units the second run did; prints the round trips,
queued calls and writes per UNIT, then the calls that made most round trips.
"""
import re
import sys


def calls(path):
    total, by = None, {}
    for line in open(path):
        m = re.search(r"(\d+) round trips, (\d+) calls queued, (\d+) writes", line)
        if m:
            total = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        m = re.match(r"flexgv remote:\s+(\w+)\s+(\d+)\s+(\d+)$", line)
        if m:
            by[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return total, by


def main():
    fewer, more, units, label, unit = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    (a, ba), (b, bb) = calls(fewer), calls(more)
    if a is None or b is None:
        print(f"FAIL {label} round trips: no count from the client")
        return
    print(f"{label} per {unit} over {units} more: {(b[0] - a[0]) / units:.2f} round trips, "
          f"{(b[1] - a[1]) / units:.1f} calls queued, {(b[2] - a[2]) / units:.2f} writes")
    d = sorted(((bb[k][0] - ba.get(k, (0, 0))[0], k) for k in bb), reverse=True)
    print(f"  round trips per {unit} by call: " + ", ".join(f"{k} {n / units:.2f}" for n, k in d[:12] if n > 0))


if __name__ == "__main__":
    main()
