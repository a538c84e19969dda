"""Prints, for each GPU scheduler region under FLEXGV_STATE_DIR, every
tenant's GPU time held and what its virtual time says it was charged
(vtime x share), so that time held but not paid for shows; how bound by
its host its requests are, and how many of its processes are MPS clients
(what running beside a holder under MPS goes by).

    python3 scripts/gpu/region_dump.py [STATE_DIR]
    python3 scripts/gpu/region_dump.py --every MS SECONDS [STATE_DIR]

With --every, samples the first region every MS milliseconds for SECONDS
instead, a line each: the epoch second, the holder's slot, hand-overs so
far, and each tenant's host-bound share and how long lower priorities are
kept from running beside it (ms), so that a scheduler's decisions can be
laid beside a load's own timeline.

The layout is scripts/gpu/sched_layout_gen.py's, generated with
include/flexgv/sched_layout_gen.h."""
import glob
import os
import struct
import sys
import time

from sched_layout_gen import (SCHED_HEADER, SCHED_MAGIC, SCHED_SLOT, SCHED_SLOT_CLAIMED, SCHED_SLOTS, SCHED_TENANT,
                              SCHED_TENANTS, SCHED_VERSION)

FULL = 10000  # 100 % in hundredths of a percent
SLOTS_AT = SCHED_HEADER["SIZE"]  # the process slots follow the header


def get(b, layout, base, name):
    """The field `name` of the struct laid out by `layout` at byte `base`."""
    off, fmt = layout[name]
    return struct.unpack_from(fmt, b, base + off)[0]


def dump(path):
    b = open(path, "rb").read()
    # a region of another layout (an older shim's) or cut short reads as garbage
    want = SLOTS_AT + SCHED_SLOT["SIZE"] * SCHED_SLOTS
    if len(b) < want:
        return f"{path}: {len(b)} bytes, a region has {want} at least"
    magic, version = get(b, SCHED_HEADER, 0, "magic"), get(b, SCHED_HEADER, 0, "version")
    if magic != SCHED_MAGIC or version != SCHED_VERSION:
        return f"{path}: magic 0x{magic:x} version {version}, not a region of version {SCHED_VERSION}"
    out = [f"quantum_us {get(b, SCHED_HEADER, 0, 'quantum_us')} switches {get(b, SCHED_HEADER, 0, 'switches')}"]
    mps = {}  # tenant index -> claimed slots that are MPS clients
    for i in range(SCHED_SLOTS):
        o = SLOTS_AT + SCHED_SLOT["SIZE"] * i
        if get(b, SCHED_SLOT, o, "state") == SCHED_SLOT_CLAIMED and get(b, SCHED_SLOT, o, "mps") == 1:
            t = get(b, SCHED_SLOT, o, "tenant")
            mps[t] = mps.get(t, 0) + 1
    for i in range(SCHED_TENANTS):
        o = SCHED_HEADER["tenants"][0] + SCHED_TENANT["SIZE"] * i
        name = get(b, SCHED_TENANT, o, "name").split(b"\0")[0].decode(errors="replace")
        if not name:
            continue
        share, host_bound = get(b, SCHED_TENANT, o, "share"), get(b, SCHED_TENANT, o, "host_bound")
        vtime, held, waited = (get(b, SCHED_TENANT, o, f) for f in ("vtime", "held_ns", "waited_ns"))
        charged = vtime * share / FULL / 1e6 if share else 0
        out.append(f"{name} share {share} held {held / 1e6:.0f} ms charged {charged:.0f} ms waited {waited / 1e6:.0f} ms"
                   f" host-bound {host_bound / FULL:.2f} mps {mps.get(i, 0)}")
    return " | ".join(out)


def sample(path):
    """One line of the region's state now (see --every)."""
    b = open(path, "rb").read()
    if len(b) < SLOTS_AT or (get(b, SCHED_HEADER, 0, "magic"), get(b, SCHED_HEADER, 0, "version")) != (SCHED_MAGIC, SCHED_VERSION):
        return f"{time.time():.3f} no region yet"  # being made, or another layout's
    now = time.monotonic_ns()  # the shim's clock (CLOCK_MONOTONIC)
    out = [f"{time.time():.3f} holder {get(b, SCHED_HEADER, 0, 'holder')} switches {get(b, SCHED_HEADER, 0, 'switches')}"]
    for i in range(SCHED_TENANTS):
        o = SCHED_HEADER["tenants"][0] + SCHED_TENANT["SIZE"] * i
        name = get(b, SCHED_TENANT, o, "name").split(b"\0")[0].decode(errors="replace")
        if name:
            off = max(0, get(b, SCHED_TENANT, o, "beside_off_ns") - now)
            out.append(f"{name} host-bound {get(b, SCHED_TENANT, o, 'host_bound') / FULL:.2f} off {off / 1e6:.0f}")
    return " | ".join(out)


args = sys.argv[1:]
every = None
if args[:1] == ["--every"]:
    if len(args) < 3:
        sys.exit("region_dump: --every needs MS and SECONDS")
    every, seconds, args = float(args[1]) / 1000, float(args[2]), args[3:]
state = args[0] if args else os.environ.get("FLEXGV_STATE_DIR", "")
paths = sorted(glob.glob(os.path.join(state, "gpu-*")))
if every is not None:
    end = time.time() + seconds
    while time.time() < end:  # the region appears once a tenant's process starts
        paths = paths or sorted(glob.glob(os.path.join(state, "gpu-*")))
        if paths:
            print(sample(paths[0]), flush=True)
        time.sleep(every)
    sys.exit(0)
if not paths:
    sys.exit(f"region_dump: no scheduler region under {state!r}")
for p in paths:
    print(dump(p))
