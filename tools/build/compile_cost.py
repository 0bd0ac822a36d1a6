#!/usr/bin/env python3
"""CPU cost of compiling sources, one by one vs as one unity batch (doc/build.md).

Reads DIR/compile_commands.json of a unity build (-DCMAKE_UNITY_BUILD=ON), finds the
unity translation unit whose path contains --unity (e.g.
`infera_router.dir/Unity/unity_1_cxx`), and compiles it, then each source it includes
with the same flags, then (with --syntax) each source with -fsyntax-only. It prints the
user+system CPU seconds of each compile (children's rusage, so load on the machine
changes wall time but hardly CPU time). Objects go to a temporary directory.

  /usr/bin/python3 tools/build/compile_cost.py --build build \
      --unity infera_router.dir/Unity/unity_1_cxx --syntax
"""
import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import tempfile


def cpu_seconds(argv, cwd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=cwd, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="a unity build directory")
    ap.add_argument("--unity", required=True, help="substring of the unity TU's path")
    ap.add_argument("--syntax", action="store_true", help="also -fsyntax-only per source")
    args = ap.parse_args()
    entries = json.load(open(os.path.join(args.build, "compile_commands.json")))
    unity = [e for e in entries if args.unity in e["file"]]
    if len(unity) != 1:
        raise SystemExit(f"{len(unity)} unity TUs match {args.unity!r}")
    e = unity[0]
    argv = [a for a in shlex.split(e["command"]) if not a.endswith("ccache")]
    out = argv.index("-o") + 1
    src = argv.index("-c") + 1
    with tempfile.TemporaryDirectory() as tmp:
        argv[out] = os.path.join(tmp, "unity.o")
        total_unity = cpu_seconds(argv, e["directory"])
        sources = re.findall(r'#include "([^"]+)"', open(e["file"]).read())
        total_plain = total_syntax = 0.0
        for s in sources:
            one = list(argv)
            one[src], one[out] = s, os.path.join(tmp, "one.o")
            t = cpu_seconds(one, e["directory"])
            total_plain += t
            line = f"{os.path.basename(s):40s} {t:7.1f} CPU-s"
            if args.syntax:
                syn = [a for i, a in enumerate(one) if i not in (out - 1, out)]
                syn[syn.index("-c")] = "-fsyntax-only"
                ts = cpu_seconds(syn, e["directory"])
                total_syntax += ts
                line += f"   -fsyntax-only {ts:6.1f}"
            print(line, flush=True)
    print(f"{len(sources)} sources one by one: {total_plain:.1f} CPU-s; as one unity TU: "
          f"{total_unity:.1f} CPU-s ({total_plain / total_unity:.2f}x)"
          + (f"; parsing (-fsyntax-only) {total_syntax:.1f} CPU-s" if args.syntax else ""))


if __name__ == "__main__":
    main()
