#!/usr/bin/env bash
# Cache-size sweep of the offline simulator on the full Mooncake conversation trace
# (doc/results-sim.md). Not run by scripts/bench: it takes minutes.
#   bench/sim/cache_sweep.sh [ENGINES] [POLICIES] [BLOCKS...]
# defaults: 8 engines, kv-aware:16,kv-aware:64,round-robin, 8192 ... 131072 blocks.
# Prints one markdown row per size (and keeps the JSON in build/sim-sweep/).
set -euo pipefail
cd "$(dirname "$0")/../.."
engines=${1:-8}
policies=${2:-kv-aware:16,kv-aware:64,round-robin}
shift $(( $# > 2 ? 2 : $# ))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(8192 16384 32768 65536 131072)
bench=build/apps/infera-bench/infera-bench
trace=../shared/data/mooncake/conversation_trace.jsonl
out=build/sim-sweep
mkdir -p "$out"
for b in "${sizes[@]}"; do
  json="$out/e${engines}_b${b}.json"
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%e %U" -o "$out/time" "$bench" offline --trace "$trace" \
    --engines "$engines" --num-gpu-blocks "$b" --policies "$policies" --jobs 2 \
    --json "$json" > "$out/e${engines}_b${b}.txt"
  read -r wall cpu < "$out/time"
  /usr/bin/python3 - "$json" "$wall" "$cpu" "$load" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
wall, cpu, load = sys.argv[2:5]
rr = next((x for x in r["results"] if x["policy"] == "round-robin"), None)
cells = []
for x in r["results"]:
    if x["policy"] != "kv-aware":
        continue
    cell = f"w={x['overlap_weight']:g}: {x['hit_rate']*100:.1f} ({x['bound_share']*100:.1f} %)"
    if rr:
        cell += (f", TTFT mean ×{rr['ttft_ms']['mean']/x['ttft_ms']['mean']:.2f}"
                 f" p99 ×{rr['ttft_ms']['p99']/x['ttft_ms']['p99']:.2f}, spread {x['load_spread']:.3f}")
    cells.append(cell)
rrs = (f"{rr['hit_rate']*100:.1f} ({rr['bound_share']*100:.1f} %), TTFT {rr['ttft_ms']['mean']:.0f}"
       f"/{rr['ttft_ms']['p99']:.0f} ms, spread {rr['load_spread']:.3f}") if rr else "-"
print(f"| {r['engines']} × {r['num_gpu_blocks']} | {r['bound_hit_rate']*100:.1f} | "
      + "; ".join(cells) + f" | {rrs} | {wall} s / {cpu} s | {load} |", flush=True)
PY
done
