#!/usr/bin/python3
"""A PD fleet offline and online agree (issue 13): the same Mooncake slice, both ways.

1. `infera-bench offline --prefill-engines 4 --decode-engines 4` simulates the PD fleet
   through core::PdPlanner (kv-aware with per-role weights 20/2, and round-robin).
2. 4 real `infera-mock-engine --role prefill` + 4 `--role decode` (vllm-nixl: serial,
   as the offline model is: prefill, transfer, decode) with the same engine model,
   the real `infera-router` (static --worker records with disagg_mode/disagg_meta, ZMQ
   KV events from all 8), and `infera-bench online --prefill-engine URL...` replaying
   the same slice at the same time scale; the prefill engines' prefix-cache counters
   give the online prefill hit rate (the decode engines' own hits do not count, as
   offline). Then the same with a round-robin router (caches reset in between).
3. Asserts the two policies differ offline by more than TOLERANCE, every request
   succeeded both ways, each request was disaggregated (4
   prefill engines each served KV to the decode engines), and per policy the offline
   and online prefill hit rates are within TOLERANCE (absolute, as fractions).

Usage: pd_online_offline_test.py BUILD_DIR TRACE [--limit N] [--keep-logs]
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, binaries, check, metric, run_bench_json,  # noqa: E402
                     start_engine, start_router, worker_flag)

PREFILL = DECODE = 4
BLOCKS = 65536       # per engine: the prefill pool holds most of the slice's reuse
BLOCK_SIZE = 16
SPEEDUP = 10         # engine model speedup ...
TIME_SCALE = 0.1     # ... and arrival compression: same load in 1/10 of the time
MAX_OUTPUT = 32      # cap output lengths (fewer SSE chunks on a 2-core machine)
PREFILL_W, DECODE_W = 20, 2
EVENT_DELAY_MS = 2   # offline: about the live ZMQ + ingestion delay
PROTOCOL = "vllm-nixl"
TOLERANCE = 0.05


def main():
    build, trace = sys.argv[1], sys.argv[2]
    keep_logs = "--keep-logs" in sys.argv[3:]
    limit = int(sys.argv[sys.argv.index("--limit") + 1]) if "--limit" in sys.argv else 1000
    bench, engine_bin, router_bin = binaries(build)
    workload = ["--trace", trace, "--limit", str(limit), "--time-scale", str(TIME_SCALE),
                "--max-output-tokens", str(MAX_OUTPUT)]
    engine_model = ["--block-size", str(BLOCK_SIZE), "--num-gpu-blocks", str(BLOCKS),
                    "--speedup", str(SPEEDUP)]
    kv = f"kv-aware:{PREFILL_W}/{DECODE_W}"

    with Processes(keep_logs=keep_logs) as procs:
        if keep_logs:
            print("logs in", procs.dir, flush=True)
        offline = run_bench_json(
            procs, "bench-offline",
            [bench, "offline", *workload, *engine_model, "--prefill-engines", str(PREFILL),
             "--decode-engines", str(DECODE), "--policies", f"{kv},round-robin",
             "--event-delay-ms", str(EVENT_DELAY_MS), "--jobs", "1"], timeout=120)

        pd = ["--pd-protocol", PROTOCOL, "--pd-kv-wait-ms", "20000"]
        prefill = [start_engine(procs, engine_bin, f"prefill{i}", "--role", "prefill",
                                "--engine-id", f"prefill{i}", *pd, *engine_model)[1]
                   for i in range(PREFILL)]
        decode = [start_engine(procs, engine_bin, f"decode{i}", "--role", "decode", *pd,
                               *engine_model)[1] for i in range(DECODE)]
        workers = ([worker_flag(f) + f",disagg_mode=prefill,disagg_protocol={PROTOCOL}"
                    for f in prefill] +
                   [worker_flag(f) + f",disagg_mode=decode,disagg_protocol={PROTOCOL}"
                    for f in decode])
        _, kv_router = start_router(procs, router_bin, workers, "--router-policy", "kv-aware",
                                    "--kv-prefill-overlap-weight", str(PREFILL_W),
                                    "--kv-decode-overlap-weight", str(DECODE_W), name="router-kv")
        _, rr_router = start_router(procs, router_bin, workers, "--router-policy", "round-robin",
                                    name="router-rr")

        extra = []
        for f in prefill + decode:
            extra += ["--reset-engine", f"http://127.0.0.1:{f['port']}"]
        for f in prefill:
            extra += ["--prefill-engine", f"http://127.0.0.1:{f['port']}"]
        online = run_bench_json(
            procs, "bench-online",
            [bench, "online", *workload, "--router", f"{kv}={kv_router}",
             "--router", f"round-robin={rr_router}", *extra, "--engines", str(PREFILL),
             "--num-gpu-blocks", str(BLOCKS), "--block-size", str(BLOCK_SIZE),
             "--model", "mock-model", "--timeout-s", "120"], timeout=400)

        check(offline["requests"] == limit and online["requests"] == limit,
              f"both replay {limit} requests")
        served = [metric(f"http://127.0.0.1:{f['port']}", "infera_mock_pd_kv_served_total")
                  for f in prefill]
        check(sum(served) == 2 * limit and all(s > 0 for s in served),
              f"every request was disaggregated: KV served by each prefill engine {served}")
        off = {r["policy"].split(":")[0]: r for r in offline["results"]}
        on = {r["policy"].split(":")[0]: r for r in online["results"]}
        check(off["kv-aware"]["hit_rate"] - off["round-robin"]["hit_rate"] > TOLERANCE,
              "offline, kv-aware and round-robin prefill hit rates differ by more than the "
              "tolerance (agreement is not a given)")
        for policy in ("kv-aware", "round-robin"):
            a, b = off[policy], on[policy]
            print(f"{policy}: prefill hit rate offline {a['hit_rate']:.4f} online "
                  f"{b['hit_rate']:.4f}; TTFT mean offline {a['ttft_ms']['mean']:.1f} ms "
                  f"online {b['ttft_ms']['mean']:.1f} ms", flush=True)
            check(a["completed"] == limit and a["failed"] == 0,
                  f"{policy} offline: every request completed")
            check(b["completed"] == limit and b["failed"] == 0,
                  f"{policy} online: every request succeeded")
            check(abs(a["hit_rate"] - b["hit_rate"]) <= TOLERANCE,
                  f"{policy}: prefill hit rates within {TOLERANCE * 100:.0f} points "
                  f"({a['hit_rate'] * 100:.1f} % offline, {b['hit_rate'] * 100:.1f} % online)")
    print("all passed")


if __name__ == "__main__":
    main()
