#!/usr/bin/env bash
# The issue-25 campaign (doc/results-sim.md, "Against the peers"): every workload at
# ~50/70/90/95 % of round-robin's capacity (16 engines: 50/90, PD: 70/90), the goodput
# searches, the admission queue at 95-120 %, on the first 3000 requests of the trace.
# Not run by scripts/bench: ~15 CPU-minutes. Output: build/sim-peers/.
#   nice -n 15 bench/sim/peers_all.sh [sweep|goodput|queue ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${BENCH:-build/apps/infera-bench/infera-bench}
trace=/work/shared/data/mooncake/conversation_trace.jsonl
out=build/sim-peers
mkdir -p "$out"
parts=${*:-sweep goodput queue}
for part in $parts; do
  case $part in
    sweep)
      for w in trace8 dominant many none bursts; do
        /usr/bin/python3 bench/sim/peers_sweep.py "$w" 50,70,90,95 | tee "$out/sweep_$w.md"
      done
      /usr/bin/python3 bench/sim/peers_sweep.py trace16 50,90 | tee "$out/sweep_trace16.md"
      /usr/bin/python3 bench/sim/peers_sweep.py pd 70,90 | tee "$out/sweep_pd.md"
      ;;
    goodput)
      # Goodput at TTFT p99 <= 2 s and 3 s: the first 3000 requests of the trace, 8 x 32768
      # (as doc/results-sim.md's earlier goodput rows), and the bursts workload.
      for slo in 2000 3000; do
        "$bench" offline --trace "$trace" --limit 3000 --engines 8 --num-gpu-blocks 32768 \
          --time-scale 0.34 --policies kv-aware,dynamo,lmetric,llm-d,sglang,round-robin \
          --slo-ttft-ms $slo --goodput-steps 4 --jobs 2 --json "$out/goodput_trace8_$slo.json" \
          2>/dev/null | tee "$out/goodput_trace8_$slo.txt"
      done
      ;;
    queue)
      # The admission queue at 95, 110 and 120 % of round-robin's capacity (time scale
      # 0.34 * 70 / load), kv-aware with and without it, the peers without.
      for load in 95 110 120; do
        s=$(/usr/bin/python3 -c "print(f'{0.34 * 70 / $load:.4f}')")
        "$bench" offline --trace "$trace" --limit 3000 --engines 8 --num-gpu-blocks 32768 \
          --time-scale "$s" --policies kv-aware,dynamo,lmetric,llm-d,sglang,round-robin \
          --admission-queue off,on \
          --jobs 2 --json "$out/queue_trace8_$load.json" 2>/dev/null | tee "$out/queue_trace8_$load.txt"
      done
      ;;
  esac
done
