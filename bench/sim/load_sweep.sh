#!/usr/bin/env bash
# Load sweep of the offline simulator on the Mooncake conversation trace
# (doc/results-sim.md, "Load term"). Not run by scripts/bench: it takes minutes.
#   bench/sim/load_sweep.sh ENGINES BLOCKS "SCALES" [LOAD_TERM] [POLICIES] [EXTRA...]
# e.g. bench/sim/load_sweep.sh 8 32768 "0.476 0.34 0.264" work kv-aware,round-robin,least-load
# One run per time scale (arrival rate); prints one markdown row per policy and keeps
# the JSON in build/sim-load/.
set -euo pipefail
cd "$(dirname "$0")/../.."
engines=$1
blocks=$2
scales=$3
term=${4:-work}
policies=${5:-kv-aware,round-robin,least-load}
shift $(( $# > 5 ? 5 : $# ))
bench=${BENCH:-build/apps/infera-bench/infera-bench}
trace=../shared/data/mooncake/conversation_trace.jsonl
out=build/sim-load
mkdir -p "$out"
for s in $scales; do
  json="$out/e${engines}_b${blocks}_s${s}_${term}.json"
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%e %U" -o "$out/time" "$bench" offline --trace "$trace" \
    --engines "$engines" --num-gpu-blocks "$blocks" --time-scale "$s" --load-term "$term" \
    --policies "$policies" --jobs 2 --json "$json" "$@" > "${json%.json}.txt"
  read -r wall cpu < "$out/time"
  /usr/bin/python3 - "$json" "$s" "$term" "$wall" "$cpu" "$load" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
scale, term, wall, cpu, load = sys.argv[2:7]
f = r["ttft_floor_ms"]
for x in r["results"]:
    name = x["policy"] + (f" w={x['overlap_weight']:g}" if x["policy"] == "kv-aware" else "")
    if x["policy"] in ("kv-aware", "least-load"):
        name += f" ({term})"
    t = x["ttft_ms"]
    g = x.get("goodput")
    print(f"| {r['engines']}×{r['num_gpu_blocks']} | {scale} | {name} | {x['hit_rate']*100:.1f} "
          f"({x['bound_share']*100:.1f} %) | {t['mean']:.0f} / {t['p50']:.0f} / {t['p99']:.0f} | "
          f"{f['mean']:.0f} / {f['p50']:.0f} / {f['p99']:.0f} | {x['gap_closed']['mean']*100:.0f} % | "
          f"{x['e2e_ms']['mean']:.0f} | {x['preemptions']} | {x['kv_util']['mean']*100:.0f} / "
          f"{x['kv_util']['max']*100:.0f} % | {wall} s / {cpu} s, load {load} |", flush=True)
PY
done
