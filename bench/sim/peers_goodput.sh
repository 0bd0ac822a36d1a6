#!/usr/bin/env bash
# Issue 25: goodput searches (TTFT p99 <= 2 s and 3 s) of kv-aware, the two peers with
# the best tails (llm-d, dynamo) and round-robin on the first 3000 requests of the
# conversation trace, 8 x 32768 (doc/results-sim.md); and the admission queue at 120 %.
#   nice -n 15 bench/sim/peers_goodput.sh [queue120] [queue-kv] [goodput]
# queue-kv: kv-aware with and without the queue at 110 and 120 % (the final binary's
# rows of doc/results-sim.md, queue_kv_<time scale>.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${BENCH:-build/apps/infera-bench/infera-bench}
trace=/work/shared/data/mooncake/conversation_trace.jsonl
out=build/sim-peers
mkdir -p "$out"
for part in ${*:-queue120 goodput}; do
  case $part in
    queue120)
      "$bench" offline --trace "$trace" --limit 3000 --engines 8 --num-gpu-blocks 32768 \
        --time-scale 0.1983 --policies kv-aware,dynamo,lmetric,llm-d,sglang,round-robin \
        --admission-queue off,on --jobs 2 --json "$out/queue_trace8_120.json" 2>/dev/null |
        tee "$out/queue_trace8_120.txt"
      ;;
    queue-kv)
      for s in 0.2164 0.1983; do
        "$bench" offline --trace "$trace" --limit 3000 --engines 8 --num-gpu-blocks 32768 \
          --time-scale $s --policies kv-aware --admission-queue off,on --jobs 2 \
          --json "$out/queue_kv_$s.json" 2>/dev/null | tee "$out/queue_kv_$s.txt"
      done
      ;;
    goodput)
      for slo in 3000 2000; do
        "$bench" offline --trace "$trace" --limit 3000 --engines 8 --num-gpu-blocks 32768 \
          --time-scale 0.34 --policies kv-aware,llm-d,dynamo,round-robin --slo-ttft-ms $slo \
          --goodput-steps 3 --jobs 2 --json "$out/goodput_trace8_$slo.json" 2>/dev/null |
          tee "$out/goodput_trace8_$slo.txt"
      done
      ;;
  esac
done
