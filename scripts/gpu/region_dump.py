"""Prints, for each GPU scheduler region under FLEXGV_STATE_DIR, every
tenant's GPU time held and what its virtual time says it was charged
(vtime x share), so that time held but not paid for shows; how bound by
its host its requests are, and how many of its processes are MPS clients
(what running beside a holder under MPS goes by).

    python3 scripts/gpu/region_dump.py [STATE_DIR]

The layout is include/flexgv/sched_layout_gen.h's (version 5)."""
import glob
import os
import struct
import sys

HEADER = 176  # bytes before the tenants
TENANT = 144  # bytes of one tenant
TENANTS = 128  # FG_SCHED_TENANTS
SLOT = 40  # bytes of one process slot
SLOTS = 256  # FG_SCHED_SLOTS
FULL = 10000  # 100 % in hundredths of a percent


def dump(path):
    b = open(path, "rb").read()
    quantum, = struct.unpack_from("<I", b, 12)
    switches, = struct.unpack_from("<Q", b, 160)
    out = [f"quantum_us {quantum} switches {switches}"]
    mps = {}  # tenant index -> claimed slots that are MPS clients
    for i in range(SLOTS):
        state, _pid, tenant, _inflight, client = struct.unpack_from("<IiIII", b, HEADER + TENANT * TENANTS + SLOT * i)
        if state == 1 and client == 1:
            mps[tenant] = mps.get(tenant, 0) + 1
    for i in range(TENANTS):
        o = HEADER + TENANT * i
        name = b[o:o + 64].split(b"\0")[0].decode(errors="replace")
        if not name:
            continue
        share, _cap, _prio, host_bound = struct.unpack_from("<4I", b, o + 64)
        vtime, held, waited, _pre = struct.unpack_from("<4Q", b, o + 88)
        charged = vtime * share / FULL / 1e6 if share else 0
        out.append(f"{name} share {share} held {held / 1e6:.0f} ms charged {charged:.0f} ms waited {waited / 1e6:.0f} ms"
                   f" host-bound {host_bound / FULL:.2f} mps {mps.get(i, 0)}")
    return " | ".join(out)


state = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FLEXGV_STATE_DIR", "")
paths = sorted(glob.glob(os.path.join(state, "gpu-*")))
if not paths:
    sys.exit(f"region_dump: no scheduler region under {state!r}")
for p in paths:
    print(dump(p))
