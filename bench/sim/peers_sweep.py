#!/usr/bin/env python3
"""Load sweep of kv-aware against the peers' policies (doc/results-sim.md, issue 25).

Not run by scripts/bench: it takes minutes. Usage (from the repository root):
  nice -n 15 /usr/bin/python3 bench/sim/peers_sweep.py WORKLOAD [LOADS] [-- EXTRA...]
WORKLOAD: trace8 | trace16 | pd | dominant | many | none | bursts
LOADS: comma list of percentages of round-robin's capacity (default 50,70,90,95).

Capacity. For the conversation trace (8 x 32768 and 16 x 16384),
the issue's measure: time scale 0.34 is ~70 % of round-robin's capacity at 8 engines,
and a load L% is time scale 0.34 * 70 / L. Round-robin's mean TTFT there is 9.9x the
no-queueing floor at 90 %. For a synthetic workload and the PD fleet the 90 % point is
found the same way: the arrival rate (PD: time scale) at which round-robin's mean TTFT
is 10x the floor's (bisection in log space over round-robin runs), and L% is that rate
* L / 90 (PD: time scale * 90 / L).

Prints one markdown row per policy and load; keeps every JSON in build/sim-peers/.
"""
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.environ.get("BENCH", os.path.join(ROOT, "build/apps/infera-bench/infera-bench"))
TRACE = os.path.join(ROOT, "../../shared/data/mooncake/conversation_trace.jsonl")
if not os.path.exists(TRACE):
    TRACE = "/work/shared/data/mooncake/conversation_trace.jsonl"
OUT = os.path.join(ROOT, "build/sim-peers")
POLICIES = os.environ.get("POLICIES", "kv-aware,dynamo,lmetric,llm-d,sglang,round-robin")

SYNTHETIC = {
    # one dominant system prompt: 80 % of the requests share it, the rest 15 others
    "dominant": ["--prefixes", "16", "--dominant-share", "0.8", "--system-tokens", "4096",
                 "--question-tokens", "256", "--output-tokens", "256"],
    # many prefixes, uniform
    "many": ["--prefixes", "256", "--system-tokens", "4096", "--question-tokens", "256",
             "--output-tokens", "256"],
    # no sharing: every prompt its own
    "none": ["--prefixes", "0", "--question-tokens", "4096", "--output-tokens", "256"],
    # many prefixes, arriving in bursts of 32
    "bursts": ["--prefixes", "64", "--system-tokens", "4096", "--question-tokens", "256",
               "--output-tokens", "256", "--burst", "32"],
}
SYNTH_COMMON = ["--workload", "synthetic", "--requests", "2000", "--engines", "8",
                "--num-gpu-blocks", "32768"]


def run(args, json_path):
    load = open("/proc/loadavg").read().split()[0]
    start = time.time()
    cpu0 = os.times()
    subprocess.run([BENCH, "offline", *args, "--json", json_path], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu1 = os.times()
    cpu = (cpu1.children_user - cpu0.children_user)
    return json.load(open(json_path)), time.time() - start, cpu, load


# The first LIMIT requests of the trace (0: all 12,031). The issue-25 tables use 3000
# (40.6 M prompt tokens): the machine was saturated by builds (load 18-24).
LIMIT = os.environ.get("LIMIT", "3000")


def workload_args(name):
    trace = ["--trace", TRACE, "--limit", LIMIT]
    if name == "trace8":
        return trace + ["--engines", "8", "--num-gpu-blocks", "32768"]
    if name == "trace16":
        return trace + ["--engines", "16", "--num-gpu-blocks", "16384"]
    if name == "pd":
        return trace + ["--prefill-engines", "4", "--decode-engines", "4",
                        "--num-gpu-blocks", "32768"]
    return SYNTH_COMMON + SYNTHETIC[name]


def rate_args(name, load):
    if name in ("trace8", "trace16"):
        return ["--time-scale", f"{0.34 * 70 / load:.4f}"]
    if name == "pd":  # a time scale: larger is slower
        return ["--time-scale", f"{RATE90[name] * 90 / load:.4f}"]
    return ["--rate", f"{RATE90[name] * load / 90:.3f}"]


RATE90 = {}


def find_rate90(name, extra):
    """Bisection (log space) for the rate where round-robin's mean TTFT = 10x floor (the
    PD fleet: the time scale, where larger means slower)."""
    scale = name == "pd"
    lo, hi = (4.0, 0.1) if scale else (1.0, 1024.0)  # lo: round-robin fine
    for _ in range(6 if not scale else 5):
        mid = math.sqrt(lo * hi)
        knob = ["--time-scale", f"{mid:.4f}"] if scale else ["--rate", f"{mid:.3f}"]
        r, *_ = run(workload_args(name) + knob + ["--policies", "round-robin", "--jobs", "1"] +
                    extra, os.path.join(OUT, f"{name}_cap.json"))
        ratio = r["results"][0]["ttft_ms"]["mean"] / max(1e-9, r["ttft_floor_ms"]["mean"])
        print(f"# {name}: {knob[0]} {mid:.3f} round-robin TTFT mean {ratio:.1f}x floor",
              flush=True)
        if ratio < 10:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    name = argv[0]
    loads = [float(x) for x in (argv[1] if len(argv) > 1 else "50,70,90,95").split(",")]
    os.makedirs(OUT, exist_ok=True)
    if name in SYNTHETIC or name == "pd":
        RATE90[name] = find_rate90(name, extra)
        unit = "time scale" if name == "pd" else "req/s"
        print(f"# {name}: 90 % of round-robin's capacity = {RATE90[name]:.3f} {unit}", flush=True)
    print("| workload | load | policy | hit % (bound) | TTFT mean / p50 / p99 ms | floor mean | "
          "gap | goodput 2 s / 3 s req/s | answered | preempt | min/mean engine share | "
          "hot prefix: engines, busiest | wall / CPU, load |")
    for load in loads:
        path = os.path.join(OUT, f"{name}_{int(load)}{'_' + '_'.join(extra) if extra else ''}.json"
                            .replace("/", "_").replace(" ", ""))
        path = os.path.join(OUT, os.path.basename(path)[:200])
        r, wall, cpu, avg = run(workload_args(name) + rate_args(name, load) +
                                ["--policies", POLICIES, "--jobs", "2"] + extra, path)
        f = r["ttft_floor_ms"]
        for x in r["results"]:
            t = x["ttft_ms"]
            slo = x.get("slo", {})
            hot = x.get("hot_prefix", {})
            rpw = x["requests_per_worker"]
            mean = sum(rpw) / max(1, len(rpw))
            share = min(rpw) / mean if mean > 0 else 0
            label = x["policy"] + (f" w={x['overlap_weight']:g}" if x["policy"] == "kv-aware" else "")
            print(f"| {name} | {load:g} % | {label} | {x['hit_rate']*100:.1f} "
                  f"({x['bound_share']*100:.0f} %) | {t['mean']:.0f} / {t['p50']:.0f} / {t['p99']:.0f} | "
                  f"{f['mean']:.0f} | {x['gap_closed']['mean']*100:.0f} % | "
                  f"{slo.get('goodput_2s_rps', 0):.2f} / {slo.get('goodput_3s_rps', 0):.2f} | "
                  f"{slo.get('answered_share', 0)*100:.1f} % | {x['preemptions']} | {share:.2f} | "
                  f"{hot.get('engines', 0)}, {hot.get('busiest_engine_share', 0)*100:.0f} % | "
                  f"{wall:.0f} s / {cpu:.0f} s, {avg} |", flush=True)


if __name__ == "__main__":
    main()
