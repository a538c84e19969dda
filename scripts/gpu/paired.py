"""Paired comparison of benchmark rounds.

Input lines are "ROUND MODE OUTPUT"; OUTPUT is either "NAME VALUE" (a time:
compared by difference) or a JSON document with one rate, such as
steps_per_s (a throughput: compared by ratio). Every mode is compared with
the first one within each round, so drift of a shared machine cancels out.
    paired.py FILE LABEL
"""
import json
import statistics as st
import sys


def main():
    path, label = sys.argv[1], sys.argv[2]
    rounds, modes = {}, []
    ratio = False
    for no, line in enumerate(open(path), 1):
        try:
            n, mode, rest = line.split(" ", 2)
            if rest.lstrip().startswith("{"):
                # a throughput: its one rate, e.g. steps_per_s
                (key, value), = ((k, v) for k, v in json.loads(rest).items() if k.endswith("_per_s"))
                ratio, unit = True, key[:-len("_per_s")] + "/s"
            else:
                value = float(rest.split()[1])
            rounds.setdefault(int(n), {})[mode] = float(value)
        except (ValueError, IndexError, TypeError, AttributeError):
            sys.exit(f"{path}:{no}: want \"ROUND MODE NAME VALUE\" or \"ROUND MODE {{...one *_per_s rate...}}\", got {line.strip()!r}")
        if mode not in modes:
            modes.append(mode)
    rs = [rounds[k] for k in sorted(rounds)]
    base = modes[0]
    vals = [r[base] for r in rs]
    unit = unit if ratio else "ns"
    print(f"{label}: {base} median {st.median(vals):.1f} {unit} (range {min(vals):.1f}..{max(vals):.1f})")
    for m in modes[1:]:
        if ratio:
            d = [r[m] / r[base] for r in rs]
            print(f"{label}: {m} / {base}: median paired ratio {st.median(d):.4f} (range {min(d):.4f}..{max(d):.4f}, {len(d)} rounds)")
        else:
            d = [r[m] - r[base] for r in rs]
            print(f"{label}: {m} - {base}: median paired difference {st.median(d):+.1f} ns (range {min(d):+.1f}..{max(d):+.1f}, {len(d)} rounds)")


if __name__ == "__main__":
    main()
