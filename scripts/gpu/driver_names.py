"""Compares api/cuda13.names with the driver's real typedef headers.

usage: driver_names.py INCLUDE_DIR NAMES_FILE RESOLVE_OUT

For each entry point of cudaTypedefs.h, cudaProfilerTypedefs.h,
cudaGLTypedefs.h, cudaEGLTypedefs.h and cudaVDPAUTypedefs.h (outside their
__CUDA_API_VERSION_INTERNAL parts), the newest PFN_<base>_v<VERSION> is the
variant the headers declare by default: NAMES_FILE must list it at that
version, and list no variant the headers lack.
Writes every (base, version, per-thread) the headers give to RESOLVE_OUT,
one "NAME VERSION [pt]" a line, for tests/clients/procnames to resolve.
Prints the differences; exits 1 when there are any.
"""
import os
import re
import sys

PFN = re.compile(r"\bPFN_(\w+?)_v(\d+)(_pt[sd][sz])?\b")


def public_text(path):
    """The header without its __CUDA_API_VERSION_INTERNAL blocks."""
    out, skip = [], 0
    for line in open(path, encoding="utf-8", errors="replace"):
        s = line.strip()
        if skip:
            if s.startswith("#if"):
                skip += 1
            elif s.startswith("#endif"):
                skip -= 1
            elif skip == 1 and s.startswith(("#else", "#elif")):
                skip = 0
            continue
        if s.startswith("#if") and "__CUDA_API_VERSION_INTERNAL" in s and "!" not in s:
            skip = 1
            continue
        out.append(line)
    return "".join(out)


def header_variants(include):
    found = set()
    for h in ("cudaTypedefs.h", "cudaProfilerTypedefs.h", "cudaGLTypedefs.h", "cudaEGLTypedefs.h",
              "cudaVDPAUTypedefs.h"):
        p = os.path.join(include, h)
        if os.path.exists(p):
            for base, ver, pt in PFN.findall(public_text(p)):
                found.add((base, int(ver), pt))
    return found


def base_of(name):
    return re.sub(r"_v\d+$", "", name)


def main(include, names_path, resolve_out):
    variants = header_variants(include)
    if not variants:
        print(f"no PFN typedefs under {include}")
        return 1
    newest = {}
    for base, ver, pt in variants:
        if not pt:
            newest[base] = max(newest.get(base, 0), ver)
    listed = {}
    for line in open(names_path):
        line = line.strip()
        if line and not line.startswith("#"):
            ver, name = line.split()
            listed.setdefault(base_of(name), {})[int(ver)] = name
    bad = 0
    for base in sorted(newest):
        if newest[base] not in listed.get(base, {}):
            print(f"in the headers, not in {names_path}: {base} at {newest[base]}")
            bad += 1
    for base, vers in sorted(listed.items()):
        for ver, name in sorted(vers.items()):
            if (base, ver, "") not in variants:
                print(f"in {names_path}, not in the headers: {name} ({ver})")
                bad += 1
    with open(resolve_out, "w") as f:
        for base, ver, pt in sorted(variants):
            f.write(f"{base} {ver}{' pt' if pt else ''}\n")
    print(f"{len(newest)} entry points in the headers, {len(variants)} variants, {bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
