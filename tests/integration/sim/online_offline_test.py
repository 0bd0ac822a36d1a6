#!/usr/bin/python3
"""Offline and online agree (issues 6 and 25): the same 1,000-request Mooncake slice, both ways,
at the router's default flags.

1. `infera-bench offline` simulates ENGINES engines and the kv-aware selector on
   the first LIMIT requests of the conversation trace.
2. ENGINES real `infera-mock-engine` processes with the same engine model flags,
   the real `infera-router` (kv-aware at its default flags, as the simulator's, static
   --worker list, ZMQ KV events with replay), and `infera-bench online` replaying
   the same slice at the same time scale through the router.
   Then the same with a round-robin router (engines' caches reset in between).
3. Asserts every online request succeeded, the engines evicted blocks, and for each
   policy the offline and online prefix hit rates are within TOLERANCE (absolute,
   hit rates as fractions). The two policies differ offline by more than TOLERANCE
   at this cache size, so agreement is not a given.

The engine model runs `--speedup` times faster than the §14 timing model and the
trace `--time-scale` compresses arrivals by the same factor, so the online run
sees the same load per engine as the offline one in 1/SPEEDUP of the wall time.
BLOCKS per engine: the slice's prompt blocks overflow the pooled 262k blocks, and each
engine's 65k blocks hold only a fraction of the working set, so round-robin loses about
half the pooled bound to eviction while kv-aware keeps nearly all of it.

Usage: online_offline_test.py BUILD_DIR TRACE [--keep-logs]
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, binaries, check, metric, run_bench_json,  # noqa: E402
                     start_engine, start_router, worker_flag)

ENGINES = 4
BLOCKS = 65536       # per engine (see above; the longest request needs 7,620)
BLOCK_SIZE = 16
LIMIT = 1000         # requests of the trace (issue 25: a 1,000-request slice)
SPEEDUP = 10         # engine model speedup ...
TIME_SCALE = 0.1     # ... and arrival compression: same load, 16.5 s of arrivals
MAX_OUTPUT = 64      # cap output lengths (fewer SSE chunks on a 2-core machine)
EVENT_DELAY_MS = 2   # offline: about the live ZMQ + ingestion delay
TOLERANCE = 0.05


def main():
    build, trace = sys.argv[1], sys.argv[2]
    keep_logs = "--keep-logs" in sys.argv[3:]
    bench, engine_bin, router_bin = binaries(build)
    workload = ["--trace", trace, "--limit", str(LIMIT), "--time-scale", str(TIME_SCALE),
                "--max-output-tokens", str(MAX_OUTPUT)]
    engine_model = ["--block-size", str(BLOCK_SIZE), "--num-gpu-blocks", str(BLOCKS),
                    "--speedup", str(SPEEDUP)]
    kv = "kv-aware"       # the default flags on both sides

    with Processes(keep_logs=keep_logs) as procs:
        if keep_logs:
            print("logs in", procs.dir, flush=True)
        offline = run_bench_json(procs, "bench-offline",
                                 [bench, "offline", *workload, *engine_model,
                                  "--engines", str(ENGINES), "--policies", f"{kv},round-robin",
                                  "--event-delay-ms", str(EVENT_DELAY_MS), "--jobs", "1"],
                                 timeout=60)

        engines = [start_engine(procs, engine_bin, f"engine{i}", *engine_model)[1]
                   for i in range(ENGINES)]
        workers = [worker_flag(f) for f in engines]
        _, kv_router = start_router(procs, router_bin, workers, name="router-kv")
        _, rr_router = start_router(procs, router_bin, workers, "--router-policy", "round-robin",
                                    name="router-rr")

        resets = []
        for f in engines:
            resets += ["--reset-engine", f"http://127.0.0.1:{f['port']}"]
        online = run_bench_json(procs, "bench-online",
                                [bench, "online", *workload, "--router", f"{kv}={kv_router}",
                                 "--router", f"round-robin={rr_router}", *resets,
                                 "--engines", str(ENGINES), "--num-gpu-blocks", str(BLOCKS),
                                 "--block-size", str(BLOCK_SIZE), "--model", "mock-model",
                                 "--timeout-s", "60"], timeout=360)

        check(offline["requests"] == LIMIT and online["requests"] == LIMIT,
              f"both replay {LIMIT} requests")
        check(abs(offline["bound_hit_rate"] - online["bound_hit_rate"]) < 1e-9,
              "both sides replay the same workload (same pooled bound)")
        check(offline["bound_hit_rate"] < offline["infinite_hit_rate"],
              "the pooled cache is smaller than the working set")
        removed = metric(kv_router, "infera_kv_events_blocks_removed_total")
        check(removed is not None and removed > 0,
              f"the engines evicted blocks ({removed:.0f} BlockRemoved seen by the router)")
        off = {r["policy"]: r for r in offline["results"]}
        on = {r["policy"]: r for r in online["results"]}
        check(off["kv-aware"]["hit_rate"] - off["round-robin"]["hit_rate"] > TOLERANCE,
              "offline, kv-aware and round-robin differ by more than the tolerance")
        for policy in ("kv-aware", "round-robin"):
            a, b = off[policy], on[policy]
            print(f"{policy}: hit rate offline {a['hit_rate']:.4f} online {b['hit_rate']:.4f}; "
                  f"TTFT mean offline {a['ttft_ms']['mean']:.1f} ms online "
                  f"{b['ttft_ms']['mean']:.1f} ms", flush=True)
            check(a["completed"] == LIMIT and a["failed"] == 0,
                  f"{policy} offline: every request completed")
            check(b["completed"] == LIMIT and b["failed"] == 0,
                  f"{policy} online: every request succeeded")
            check(abs(a["hit_rate"] - b["hit_rate"]) <= TOLERANCE,
                  f"{policy}: hit rates within {TOLERANCE * 100:.0f} points "
                  f"({a['hit_rate'] * 100:.1f} % offline, {b['hit_rate'] * 100:.1f} % online)")
        check(on["kv-aware"]["hit_rate"] > on["round-robin"]["hit_rate"],
              "online, kv-aware beats round-robin")
    print("all passed")


if __name__ == "__main__":
    main()
