#!/usr/bin/env python3
"""kv-aware at the default flags beside kv-aware with extra flags, cell by cell
(doc/results-sim.md, issue 25, session 15: the timed pending prefill).

Not run by scripts/bench: minutes per cell. Usage (from the repository root):
  nice -n 10 /usr/bin/python3 bench/sim/variant_compare.py CELLS -- FLAGS...
CELLS: comma list of WORKLOAD@LOAD (trace8@70, trace16@90, dominant@50, pd@90, ...),
  or "all" (the cells issue 25 holds today: trace8 and trace16 at 50/70/90/95, the
  synthetic workloads at 50/70/90/95, PD at 70/90).
FLAGS: the variant's flags (e.g. --kv-timed-prefill true). SEEDS=1,2,3 runs the
synthetic workloads with each --seed (1: the default seed) and reports the mean; with
SLICES=1 the trace and PD cells too, seed s being the trace's slice s (requests
(s-1)*LIMIT on, `--offset`) at the slice-1 time scale. VC_OUT: the JSON directory
(default build/sim-variant; the default flags' runs are cached by cell and seed, so a
new binary needs its own).

The rates are session 13's (peers_sweep.py's bisection, doc/results-sim.md): 90 % =
dominant 454.496, many 72.097, none 58.056, bursts 123.908 req/s; trace time scale
0.34 * 70 / L; PD 0.299 * 90 / L. Both runs of a cell use the same binary ($BENCH) in
one sitting; every figure is virtual time. JSON in build/sim-variant/.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_sweep as ps  # noqa: E402

ps.RATE90.update({"dominant": 454.496, "many": 72.097, "none": 58.056, "bursts": 123.908,
                  "pd": 0.299})
OUT = os.path.join(ps.ROOT, os.environ.get("VC_OUT", "build/sim-variant"))
ALL = ([f"{w}@{l}" for w in ("trace8", "trace16", "dominant", "many", "none", "bursts")
        for l in (50, 70, 90, 95)] + ["pd@70", "pd@90"])


def seed_args(name, seed):
    """A synthetic workload's --seed; the trace and PD cells' slice `seed` of the trace
    (requests (seed-1)*LIMIT on, --offset). Seed 1: nothing."""
    if seed == 1:
        return []
    if name in ps.SYNTHETIC:
        return ["--seed", str(seed)]
    return ["--offset", str((seed - 1) * int(ps.LIMIT))]


def run_cell(name, load, flags, seed):
    args = (ps.workload_args(name) + ps.rate_args(name, load) +
            ["--policies", "kv-aware", "--jobs", "1"] + seed_args(name, seed))
    tag = "_".join(f.strip("-") for f in flags) or "default"
    path = os.path.join(OUT, f"{name}_{load}_s{seed}_{tag}.json"[:200])
    if not os.path.exists(path):
        subprocess.run([ps.BENCH, "offline", *args, *flags, "--json", path], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = json.load(open(path))
    x = r["results"][0]
    return x["ttft_ms"]["mean"], x["ttft_ms"]["p99"], x["bound_share"] * 100


def main():
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1:] if "--" in argv else []
    cells = ALL if argv[0] == "all" else argv[0].split(",")
    seeds = [int(s) for s in os.environ.get("SEEDS", "1").split(",")]
    os.makedirs(OUT, exist_ok=True)
    print(f"# variant: {' '.join(flags)}; seeds {seeds} (synthetic only)")
    print("| cell | default mean / p99 ms, bound % | variant mean / p99 ms, bound % | "
          "mean Δ | p99 Δ | wall s, load |")
    print("|---|---:|---:|---:|---:|---:|")
    for cell in cells:
        name, load = cell.split("@")
        load = int(load)
        cs = seeds if name in ps.SYNTHETIC or os.environ.get("SLICES") == "1" else [1]
        start, avg = time.time(), open("/proc/loadavg").read().split()[0]
        base = [run_cell(name, load, [], s) for s in cs]
        var = [run_cell(name, load, flags, s) for s in cs]
        m = lambda rs, k: sum(r[k] for r in rs) / len(rs)  # noqa: E731
        bm, bp, bb = m(base, 0), m(base, 1), m(base, 2)
        vm, vp, vb = m(var, 0), m(var, 1), m(var, 2)
        print(f"| {cell} | {bm:.1f} / {bp:.0f}, {bb:.1f} | {vm:.1f} / {vp:.0f}, {vb:.1f} | "
              f"{(vm / bm - 1) * 100:+.1f} % | {(vp / bp - 1) * 100:+.1f} % | "
              f"{time.time() - start:.0f}, {avg} |", flush=True)


if __name__ == "__main__":
    main()
