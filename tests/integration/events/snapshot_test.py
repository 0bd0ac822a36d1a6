#!/usr/bin/python3
"""KV-view snapshots: warm restart from a local file (doc/snapshot.md §11).

Real processes on free ports: two infera-mock-engines (replay sockets) and
infera-router with --kv-snapshot-path in a temp dir. Bounded polls only.

  --case warm     traffic, wait for a periodic snapshot (--kv-snapshot-interval-s 1),
                  more traffic, kill -9, restart: /ready 200, the file loaded, every
                  restored view verified ok, the first repeated prompt's pick log has
                  cache_hits > 0, the views equal the engines' dumps (the batches after
                  the snapshot came through the verify replay)
  --case refused  a flipped byte, then another --kv-snapshot-fleet: each refusal is
                  logged and counted and the router still gets ready (full replay)
  --case sigterm  --kv-snapshot-interval-s 0 (no periodic snapshot): SIGTERM writes the
                  final one (created after the last request), the router exits 0; the
                  restart loads it and needs no batch beyond it (verify ok, one
                  replayed batch per target: the record's own)
"""
import argparse
import os
import re
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, free_port, http, poll, start_router, worker_flag  # noqa: E402
import nats_transport_test as nt  # noqa: E402

ARGS = None


def labeled(base, name, label, value):
    _, text, _ = http("GET", base + "/metrics")
    m = re.search(rf'^{name}{{{label}="{value}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def writes_ok(base):
    return labeled(base, "infera_router_kv_snapshot_writes_total", "result", "ok") or 0


def setup(procs, tmp):
    nt.ARGS = ARGS
    engines = [nt.start_engine(procs, f"engine{i}", (free_port(), free_port(), free_port()))[1]
               for i in range(2)]
    workers = [worker_flag(f) for f in engines]
    path = os.path.join(tmp, "kv.snap")
    extra = ["--kv-snapshot-path", path, "--kv-snapshot-interval-s", "1"]
    return engines, workers, path, extra


def wait_views(base, engines, what):
    for f in engines:
        poll(lambda f=f: nt.router_blocks(base, f) == nt.engine_blocks(f), what)


def snapshot_after_now(base):
    """Waits for a snapshot that began after this call (two more writes)."""
    before = writes_ok(base)
    poll(lambda: writes_ok(base) >= before + 2, "a periodic snapshot after the traffic",
         timeout=20)


def restart(procs, router, workers, extra, name):
    router.p.kill()  # SIGKILL: no final snapshot, no drain
    router.p.wait(timeout=10)
    t0 = time.time()
    router, base = start_router(procs, ARGS.router, workers, *extra, name=name, ready=False)
    ms, seen = nt.wait_ready(router, base, t0)
    return router, base, ms, seen


def case_warm(procs, tmp):
    engines, workers, path, extra = setup(procs, tmp)
    router, base = start_router(procs, ARGS.router, workers, *extra, name="router1", ready=False)
    nt.traffic(base, 0, 8)
    wait_views(base, engines, "views warm")
    snapshot_after_now(base)
    check(os.path.getsize(path) > 128 + 48, f"snapshot written ({os.path.getsize(path)} bytes)")
    nt.traffic(base, 8, 4)  # after the snapshot: must come back through the verify replay
    wait_views(base, engines, "views warm after more traffic")
    stale = path + ".tmp.4194303"  # above pid_max's default: no such process
    with open(stale, "wb") as f:  # the debris of a kill -9 during a write
        f.write(b"partial")
    router, base, ms, seen = restart(procs, router, workers, extra, "router2")
    check(not os.path.exists(stale), "the stale temp file was removed at start")
    router.wait_line(r"kv-snapshot: loaded .*")
    check(labeled(base, "infera_router_kv_snapshot_loads_total", "result", "loaded") == 1,
          "the snapshot was loaded")
    check(labeled(base, "infera_router_kv_snapshot_verify_total", "result", "ok") == len(engines),
          "every restored view verified ok")
    restored = float(re.search(r"^infera_router_kv_snapshot_restored_blocks_total (\S+)$",
                               http("GET", base + "/metrics")[1], re.M).group(1))
    check(restored > 0, f"{restored:.0f} blocks restored")
    rid = "snapshot-warm"
    check(nt.complete(base, 0, request_id=rid) == 200, "first request after the restart")
    line = router.wait_line(rf"pick .*request_id={rid} .*").group(0)
    hits = int(re.search(r"cache_hits=(\d+)", line).group(1))
    check(hits > 0, f"first repeated prompt hits: {line}")
    wait_views(base, engines, "restored views equal the engines' dumps")
    replays = nt.metric(base, "infera_kv_events_replays_total")
    print(f"snapshot warm restart: ready {ms:.0f} ms after start (/ready said {sorted(seen)}), "
          f"{restored:.0f} blocks restored, {replays:.0f} replays, first cache_hits={hits}",
          flush=True)


def case_refused(procs, tmp):
    engines, workers, path, extra = setup(procs, tmp)
    router, base = start_router(procs, ARGS.router, workers, *extra, name="router1", ready=False)
    nt.traffic(base, 0, 8)
    wait_views(base, engines, "views warm")
    snapshot_after_now(base)
    router.p.kill()
    router.p.wait(timeout=10)
    with open(path, "r+b") as f:  # flip one byte in the middle of the records
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x40]))
    router, base = start_router(procs, ARGS.router, workers, *extra, name="router2", ready=False)
    nt.wait_ready(router, base, time.time())
    router.wait_line(r"kv-snapshot: refused .*: checksum .*; full replay")
    check(labeled(base, "infera_router_kv_snapshot_loads_total", "result",
                  "refused_checksum") == 1, "a flipped byte is refused (checksum)")
    wait_views(base, engines, "views rebuilt by the full replay")
    snapshot_after_now(base)
    other = extra + ["--kv-snapshot-fleet", "another-fleet"]
    router, base, _, _ = restart(procs, router, workers, other, "router3")
    router.wait_line(r"kv-snapshot: refused .*: fleet .*; full replay")
    check(labeled(base, "infera_router_kv_snapshot_loads_total", "result", "refused_fleet") == 1,
          "another fleet's file is refused")
    wait_views(base, engines, "views rebuilt by the full replay")


def case_sigterm(procs, tmp):
    engines, workers, path, extra = setup(procs, tmp)
    extra = ["--kv-snapshot-path", path, "--kv-snapshot-interval-s", "0"]
    router, base = start_router(procs, ARGS.router, workers, *extra, name="router1", ready=False)
    nt.traffic(base, 0, 8)
    wait_views(base, engines, "views warm")
    last_request = time.time()
    check(not os.path.exists(path), "no periodic snapshot with --kv-snapshot-interval-s 0")
    router.p.terminate()
    check(router.p.wait(timeout=40) == 0, "SIGTERM: the router exits 0")
    check(os.path.exists(path), "SIGTERM wrote the final snapshot")
    with open(path, "rb") as f:
        created_ms = int.from_bytes(f.read(24)[16:24], "little")
    check(created_ms / 1000 >= last_request - 1, "the final snapshot was taken after the traffic")
    t0 = time.time()
    router, base = start_router(procs, ARGS.router, workers, *extra, name="router2", ready=False)
    nt.wait_ready(router, base, t0)
    check(labeled(base, "infera_router_kv_snapshot_verify_total", "result", "ok") == len(engines),
          "every restored view verified ok")
    applied = nt.metric(base, "infera_kv_events_batches_total")
    check(applied == 0, f"no batch beyond the snapshot was applied ({applied:.0f})")
    check(nt.metric(base, "infera_kv_events_resyncs_total") == 0, "no view was rebuilt")
    wait_views(base, engines, "restored views equal the engines' dumps")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--case", choices=["warm", "refused", "sigterm"], required=True)
    ARGS = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="infera-snap-") as tmp, \
            Processes(log_dir=os.environ.get("INFERA_TEST_LOG_DIR")) as procs:
        {"warm": case_warm, "refused": case_refused, "sigterm": case_sigterm}[ARGS.case](
            procs, tmp)
    print(f"all passed in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
