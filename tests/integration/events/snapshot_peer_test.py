#!/usr/bin/python3
"""A replica joining from a peer's snapshot over NATS (--kv-snapshot-peer-join,
doc/snapshot.md §9.1, §11).

Real processes on free ports: Debian's nats-server (core NATS), two infera-mock-engines
(replay sockets), infera-routers with --router-replica-sync and --kv-snapshot-path, each
its own file in a temp dir. Bounded polls only.

  --case join    router A takes traffic and writes a periodic snapshot; router B starts
                 with --kv-snapshot-peer-join and no file: it fetches A's file (A counts
                 the chunks it served), loads it as the fetch checked it
                 (loads_total{loaded}), fsyncs it after the rename, verifies every
                 view ok, is ready, its first repeated prompt hits, and its views equal
                 the engines' dumps
  --case nopeer  B alone (no replica serves): `peer join failed: no_offer`,
                 peer_fetch_total{result="no_offer"}, then the full replay: ready, views
                 equal the engines'
  --case stale   A serves a file older than B's --kv-snapshot-max-age-s 1 (written at
                 A's SIGTERM, A restarted with --kv-snapshot-interval-s 0): A offers it,
                 B refuses the offer (`peer join failed: incompatible`,
                 peer_fetch_total{result="incompatible"}, A served no chunk), then the
                 full replay
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
from harness import Processes, check, free_port, http, poll, start_router  # noqa: E402
import nats_transport_test as nt  # noqa: E402
import snapshot_test as st  # noqa: E402

ARGS = None


def counter(base, name):
    m = re.search(rf"^{name} (\S+)$", http("GET", base + "/metrics")[1], re.M)
    return float(m.group(1)) if m else None


def setup(procs, tmp):
    nt.ARGS = st.ARGS = ARGS
    port = free_port()
    nats = procs.start("nats", ["nats-server", "-a", "127.0.0.1", "-p", str(port)])
    nats.wait_line(r"Server is ready")
    engines, workers, _, _ = st.setup(procs, tmp)
    return engines, workers, f"nats://127.0.0.1:{port}"


def flags(tmp, name, url, *extra):
    return ["--kv-snapshot-path", os.path.join(tmp, f"{name}.snap"), "--kv-snapshot-interval-s",
            "1", "--router-replica-sync", "--nats-server", url, *extra]


def case_join(procs, tmp):
    engines, workers, url = setup(procs, tmp)
    a, a_base = start_router(procs, ARGS.router, workers, *flags(tmp, "a", url), name="routerA",
                             ready=False)
    a.wait_line(r"kv-snapshot: serving .* to joining peers as .*")
    nt.traffic(a_base, 0, 8)
    st.wait_views(a_base, engines, "A's views warm")
    st.snapshot_after_now(a_base)
    t0 = time.time()
    b, b_base = start_router(procs, ARGS.router, workers,
                             *flags(tmp, "b", url, "--kv-snapshot-peer-join"), name="routerB",
                             ready=False)
    ms, seen = nt.wait_ready(b, b_base, t0)
    line = b.wait_line(r"kv-snapshot: fetched (\d+) bytes from peer \S+ into .*")
    check(int(line.group(1)) > 128 + 48, f"B fetched A's file: {line.group(0)}")
    check(st.labeled(b_base, "infera_router_kv_snapshot_peer_fetch_total", "result", "ok") == 1,
          "peer_fetch_total{result=\"ok\"} is 1")
    served = counter(a_base, "infera_router_kv_snapshot_peer_served_chunks_total")
    check(served >= 1, f"A served {served:.0f} chunk(s)")
    check(st.labeled(b_base, "infera_router_kv_snapshot_loads_total", "result", "loaded") == 1,
          "B loaded the fetched file")
    b.wait_line(r"kv-snapshot: loaded .*\(checked by the peer fetch\)")  # not checked twice
    b.wait_line(r"kv-snapshot: fetched file synced in \d+ ms")  # after the rename
    check(st.labeled(b_base, "infera_router_kv_snapshot_verify_total", "result", "ok") ==
          len(engines), "every restored view verified ok")
    restored = counter(b_base, "infera_router_kv_snapshot_restored_blocks_total")
    check(restored > 0, f"{restored:.0f} blocks restored from A's file")
    rid = "peer-join"
    check(nt.complete(b_base, 0, request_id=rid) == 200, "B's first request")
    pick = b.wait_line(rf"pick .*request_id={rid} .*").group(0)
    hits = int(re.search(r"cache_hits=(\d+)", pick).group(1))
    check(hits > 0, f"B's first repeated prompt hits: {pick}")
    st.wait_views(b_base, engines, "B's views equal the engines' dumps")
    print(f"peer join: B ready {ms:.0f} ms after start (/ready said {sorted(seen)}), "
          f"{restored:.0f} blocks restored, A served {served:.0f} chunk(s), first cache_hits="
          f"{hits}", flush=True)


def case_nopeer(procs, tmp):
    engines, workers, url = setup(procs, tmp)
    t0 = time.time()
    b, b_base = start_router(procs, ARGS.router, workers,
                             *flags(tmp, "b", url, "--kv-snapshot-peer-join"), name="routerB",
                             ready=False)
    nt.wait_ready(b, b_base, t0)
    b.wait_line(r"kv-snapshot: peer join failed: no_offer: .*; full replay")
    check(st.labeled(b_base, "infera_router_kv_snapshot_peer_fetch_total", "result",
                     "no_offer") == 1, "peer_fetch_total{result=\"no_offer\"} is 1")
    check(st.labeled(b_base, "infera_router_kv_snapshot_loads_total", "result", "absent") == 1,
          "no file: the full replay")
    nt.traffic(b_base, 0, 4)
    st.wait_views(b_base, engines, "B's views equal the engines' dumps")


def case_stale(procs, tmp):
    engines, workers, url = setup(procs, tmp)
    once = flags(tmp, "a", url)
    once[once.index("--kv-snapshot-interval-s") + 1] = "0"  # only at SIGTERM
    a, a_base = start_router(procs, ARGS.router, workers, *once, name="routerA1")
    nt.traffic(a_base, 0, 4)
    st.wait_views(a_base, engines, "A's views warm")
    a.p.terminate()
    check(a.p.wait(timeout=40) == 0, "A wrote its final snapshot and exited")
    path = os.path.join(tmp, "a.snap")
    with open(path, "rb") as f:
        created_ms = int.from_bytes(f.read(24)[16:24], "little")
    a, a_base = start_router(procs, ARGS.router, workers, *once, name="routerA2")
    a.wait_line(r"kv-snapshot: serving .* to joining peers as .*")
    poll(lambda: time.time() * 1000 - created_ms > 1500, "A's file older than 1.5 s", timeout=10)
    b, b_base = start_router(procs, ARGS.router, workers,
                             *flags(tmp, "b", url, "--kv-snapshot-peer-join",
                                    "--kv-snapshot-max-age-s", "1"), name="routerB")
    b.wait_line(r"kv-snapshot: peer join failed: incompatible: no compatible offer of 1; full "
                r"replay")
    check(st.labeled(b_base, "infera_router_kv_snapshot_peer_fetch_total", "result",
                     "incompatible") == 1, "peer_fetch_total{result=\"incompatible\"} is 1")
    check(counter(a_base, "infera_router_kv_snapshot_peer_served_chunks_total") == 0,
          "A served no chunk")
    st.wait_views(b_base, engines, "B's views rebuilt by the full replay")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--case", choices=["join", "nopeer", "stale"], required=True)
    ARGS = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="infera-peer-") as tmp, \
            Processes(log_dir=os.environ.get("INFERA_TEST_LOG_DIR")) as procs:
        {"join": case_join, "nopeer": case_nopeer, "stale": case_stale}[ARGS.case](procs, tmp)
    print(f"all passed in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
