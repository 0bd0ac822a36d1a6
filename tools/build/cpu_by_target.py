#!/usr/bin/env python3
"""Sums a tools/build/cpu_log.sh log by target (doc/build.md).

Each log line is "user sys wall output" for one compile or link. The target is the
`<name>.dir` folder of an object (or PCH), or the name of a linked library or binary.
With --unit BUILD_DIR, the targets of that build's `ctest -L unit` tests (infera_test
names its binary after its test) are also summed apart.

  /usr/bin/python3 tools/build/cpu_by_target.py cpu.log [--unit build] [--top 30]
"""
import argparse
import collections
import os
import re
import subprocess


def target_of(out):
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", out)
    if m:
        return m.group(1)
    base = os.path.basename(out)
    m = re.fullmatch(r"lib(.+)\.(a|so)", base)
    return m.group(1) if m else base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--unit", help="build dir whose `ctest -N -L unit` names the unit tests")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    cpu = collections.Counter()
    count = collections.Counter()
    for line in open(args.log):
        parts = line.split(None, 3)
        if len(parts) < 4 or not re.fullmatch(r"[0-9.]+", parts[0]):
            continue  # /usr/bin/time's "Command exited with non-zero status" lines
        t = target_of(parts[3].strip())
        cpu[t] += float(parts[0]) + float(parts[1])
        count[t] += 1
    total = sum(cpu.values())
    print(f"{'target':40s} {'CPU-s':>8s} {'cmds':>5s}")
    for t, c in cpu.most_common(args.top):
        print(f"{t:40s} {c:8.1f} {count[t]:5d}")
    print(f"{'total (' + str(len(cpu)) + ' targets)':40s} {total:8.1f} {sum(count.values()):5d}")
    if args.unit:
        listing = subprocess.run(["ctest", "--test-dir", args.unit, "-N", "-L", "unit"],
                                 capture_output=True, text=True, check=True).stdout
        unit = set(re.findall(r"Test +#\d+: (\S+)", listing))
        s = sum(c for t, c in cpu.items() if t in unit)
        print(f"unit-test targets ({len(unit & set(cpu))} of {len(unit)} found): {s:.1f} CPU-s")


if __name__ == "__main__":
    main()
