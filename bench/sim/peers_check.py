#!/usr/bin/env python3
"""Issue 25's first "done when" point, cell by cell, over several seeds: kv-aware at the
binary's default flags against every peer policy and round-robin, in one `infera-bench
offline` run per cell and seed (doc/results-sim.md, session 18).

Not run by scripts/bench: ~15 minutes on one core. Usage (from the repository root):
  SEEDS=1,2,3 nice /usr/bin/python3 bench/sim/peers_check.py CELLS [-- FLAGS...]
CELLS: comma list of WORKLOAD@LOAD, or "all" (variant_compare.py's cells). Seeds: the
synthetic workloads' --seed; the trace and PD cells' slice of LIMIT requests (seed s =
requests (s-1)*LIMIT on, `--offset`), each at the slice-1 time scale. FLAGS go to every
run (kv-aware reads them; the peers do not).

Prints per cell the mean over seeds of each policy's TTFT mean and p99, and whether
kv-aware's are <= the best peer's (round-robin included); beside them, from the same
runs, kv-aware's other "done when" figures: its share of the pooled bound's hit rate
("—" where the workload shares nothing), the fewest requests any engine got over the
mean per engine (the starvation check), and its TTFT mean over the no-queueing floor's.
Last, how many cells hold both. ORACLE=1 adds, for the mixed-fleet cells, the TTFT
oracle's mean / p99 (`--policies ttft-oracle`, a bound no router reaches: doc/sim.md;
one more run per cell and seed, ~15 s per trace slice). JSON in build/sim-check/.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_sweep as ps  # noqa: E402
import variant_compare as vc  # noqa: E402

OUT = os.path.join(ps.ROOT, os.environ.get("PC_OUT", "build/sim-check"))
PEERS = ["dynamo", "lmetric", "llm-d", "sglang", "round-robin"]


def run(name, load, seed, flags):
    args = ps.workload_args(name) + ps.rate_args(name, load) + vc.seed_args(name, seed)
    tag = "_".join(f.strip("-") for f in flags) or "default"
    path = os.path.join(OUT, f"{name}_{load}_s{seed}_{tag}.json"[:200])
    if not os.path.exists(path):
        subprocess.run([ps.BENCH, "offline", *args, "--policies", ",".join(["kv-aware"] + PEERS),
                        "--jobs", "1", *flags, "--json", path], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.load(open(path))
    out = {}
    for x in report["results"]:
        out[x["policy"].split()[0]] = (x["ttft_ms"]["mean"], x["ttft_ms"]["p99"])
    kv = report["results"][0]
    per_engine = kv["requests_per_worker"]
    out["_kv"] = (kv["bound_share"] * 100 if report["bound_hit_rate"] > 0 else None,
                  min(per_engine) / (sum(per_engine) / len(per_engine)),
                  kv["ttft_ms"]["mean"] / report["ttft_floor_ms"]["mean"])
    return out


def oracle(name, load, seed):
    """The TTFT oracle's (mean, p99) on one cell and seed; None on the PD fleet."""
    if name == "pd":
        return None
    args = ps.workload_args(name) + ps.rate_args(name, load) + vc.seed_args(name, seed)
    path = os.path.join(OUT, f"{name}_{load}_s{seed}_ttft-oracle.json")
    if not os.path.exists(path):
        subprocess.run([ps.BENCH, "offline", *args, "--policies", "ttft-oracle", "--jobs", "1",
                        "--json", path], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    x = json.load(open(path))["results"][0]
    return x["ttft_ms"]["mean"], x["ttft_ms"]["p99"]


def main():
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1:] if "--" in argv else []
    cells = vc.ALL if argv[0] == "all" else argv[0].split(",")
    seeds = [int(s) for s in os.environ.get("SEEDS", "1").split(",")]
    os.makedirs(OUT, exist_ok=True)
    print(f"# kv-aware {' '.join(flags) or '(default flags)'} vs the peers; seeds/slices {seeds}")
    with_oracle = os.environ.get("ORACLE") == "1"
    print("| cell | kv-aware mean / p99 ms | best peer mean (who) | best peer p99 (who) | "
          "mean ≤ | p99 ≤ | bound % | min/mean engine | mean / floor |" +
          (" TTFT oracle mean / p99 |" if with_oracle else ""))
    print("|---|---:|---:|---:|:-:|:-:|---:|---:|---:|" + ("---:|" if with_oracle else ""))
    held = 0
    for cell in cells:
        name, load = cell.split("@")
        runs = [run(name, int(load), s, flags) for s in seeds]
        extra = [r.pop("_kv") for r in runs]
        avg = {p: (sum(r[p][0] for r in runs) / len(runs), sum(r[p][1] for r in runs) / len(runs))
               for p in runs[0]}
        kv = avg.pop("kv-aware")
        bm = min(avg, key=lambda p: avg[p][0])
        bp = min(avg, key=lambda p: avg[p][1])
        ok = lambda a, b: "yes" if a <= b else f"no (+{(a / b - 1) * 100:.1f} %)"  # noqa: E731
        held += kv[0] <= avg[bm][0] and kv[1] <= avg[bp][1]
        bound = ("—" if extra[0][0] is None else
                 f"{sum(e[0] for e in extra) / len(extra):.1f}")
        spread = min(e[1] for e in extra)
        floor = sum(e[2] for e in extra) / len(extra)
        column = ""
        if with_oracle:
            bounds = [oracle(name, int(load), s) for s in seeds]
            column = (" — |" if bounds[0] is None else
                      f" {sum(b[0] for b in bounds) / len(bounds):.1f} / "
                      f"{sum(b[1] for b in bounds) / len(bounds):.0f} |")
        print(f"| {cell} | {kv[0]:.1f} / {kv[1]:.0f} | {avg[bm][0]:.1f} ({bm}) | "
              f"{avg[bp][1]:.0f} ({bp}) | {ok(kv[0], avg[bm][0])} | {ok(kv[1], avg[bp][1])} | "
              f"{bound} | {spread:.2f} | {floor:.2f} |{column}", flush=True)
    print(f"# mean and p99 <= every peer's on {held} of {len(cells)} cells")


if __name__ == "__main__":
    main()
