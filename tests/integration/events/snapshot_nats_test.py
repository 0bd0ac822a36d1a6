#!/usr/bin/python3
"""KV-view snapshots of a router whose KV events come over NATS JetStream
(doc/snapshot.md §6.4).

Real processes on free ports: Debian's nats-server (JetStream, file store in a temp
dir), two infera-mock-engines, one relay each (infera-register --kv-relay nats
--relay-only), infera-router --kv-event-transport nats --kv-snapshot-path. Bounded
polls only.

  --case warm   traffic, a periodic snapshot, kill -9, restart: /ready 200, the file
                loaded, the consumer starts after the snapshot's stream position (log;
                fewer messages consumed than the stream holds), the first repeated
                prompt hits, the views equal the engines' dumps. Then traffic the file
                does not hold (interval 0: no new snapshot), kill -9, restart from the
                same file: the tail is consumed and the views equal the dumps again.
                Then SIGTERM writes the final snapshot; the next start consumes nothing.
  --case stale  the stream is recreated while the router is down (NATS store wiped; the
                relays publish the engines' buffers again): the file is refused
                (refused_stream), the stream is consumed from its start, and the views
                equal the engines' dumps.
  --case truncated  the stream (8 messages at most) discards what came after the
                snapshot while the router is down: refused_stream ("needs stream seq
                N, first is M"), the stream consumed from its start.
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, free_port, http, poll, start_router, worker_flag  # noqa: E402
import nats_transport_test as nt  # noqa: E402
import snapshot_test as st  # noqa: E402

ARGS = None


def setup(procs, tmp, *relay_flags, monitor_port=None):
    nt.ARGS = ARGS
    st.ARGS = ARGS
    nats_port = free_port()
    nats_url = f"nats://127.0.0.1:{nats_port}"
    monitor = ["-m", str(monitor_port)] if monitor_port else []
    nats = nt.start_nats(procs, nats_port, os.path.join(tmp, "js"), "nats", *monitor)
    engines = [nt.start_engine(procs, f"engine{i}", (free_port(), free_port(), free_port()))[1]
               for i in range(2)]
    for i, f in enumerate(engines):
        nt.start_relay(procs, f, nats_url, f"relay{i}", *relay_flags)
    workers = [worker_flag(f) for f in engines]
    path = os.path.join(tmp, "kv.snap")
    flags = ["--kv-event-transport", "nats", "--nats-server", nats_url, "--kv-snapshot-path", path]
    return (nats, nats_port), engines, workers, path, flags


def loaded(base, result):
    return st.labeled(base, "infera_router_kv_snapshot_loads_total", "result", result) or 0


def messages(base):
    return nt.metric(base, "infera_kv_events_messages_total") or 0


def start_seq(router):
    """The stream sequence the consumer started from (its subscription's log line)."""
    line = router.wait_line(r"kv events: following JetStream \S+ from stream seq (\d+)")
    return int(line.group(1))


def first_repeat_hits(router, base, group, rid):
    check(nt.complete(base, group, request_id=rid) == 200, f"request {rid}")
    line = router.wait_line(rf"pick .*request_id={rid} .*").group(0)
    hits = int(re.search(r"cache_hits=(\d+)", line).group(1))
    check(hits > 0, f"the repeated prompt of group {group} hits: {line}")
    return hits


def case_warm(procs, tmp):
    _, engines, workers, path, flags = setup(procs, tmp)
    router, base = start_router(procs, ARGS.router, workers, *flags, "--kv-snapshot-interval-s",
                                "1", name="router1", ready=False)
    nt.traffic(base, 0, 12)
    st.wait_views(base, engines, "views warm")
    st.snapshot_after_now(base)
    st.wait_views(base, engines, "views warm after the snapshot")
    total = messages(base)  # router1 consumed the stream from its start
    once = flags + ["--kv-snapshot-interval-s", "0"]  # keeps router1's last file
    router, base, ms, seen = st.restart(procs, router, workers, once, "router2")
    router.wait_line(r"kv-snapshot: loaded .*")
    check(loaded(base, "loaded") == 1, "the snapshot was loaded")
    first = start_seq(router)
    check(first > 1, f"the consumer starts after the snapshot (stream seq {first}), not at 1")
    tail = messages(base)
    check(tail < total, f"only the tail was consumed ({tail:.0f} of {total:.0f} messages)")
    hits = first_repeat_hits(router, base, 0, "nats-snap-1")
    st.wait_views(base, engines, "restored views equal the engines' dumps")
    print(f"nats snapshot warm restart: ready {ms:.0f} ms after start (/ready said "
          f"{sorted(seen)}), consumed from stream seq {first}, {tail:.0f} of {total:.0f} "
          f"messages, first cache_hits={hits}", flush=True)

    # Traffic the file does not hold: the next start must consume it from the stream.
    nt.traffic(base, 20, 3)
    st.wait_views(base, engines, "views warm after the tail's traffic")
    router, base, _, _ = st.restart(procs, router, workers, once, "router3")
    check(start_seq(router) == first, "the same file: the same start")
    consumed = messages(base)
    check(consumed >= tail + 3, f"the tail was consumed ({consumed:.0f} messages)")
    first_repeat_hits(router, base, 20, "nats-snap-2")  # a prompt only the tail holds
    st.wait_views(base, engines, "views equal the dumps after the tail")
    check(nt.metric(base, "infera_kv_events_gaps_total") == 0, "no gap")

    # SIGTERM: the final snapshot; the next start has nothing left to consume.
    router.p.terminate()
    check(router.p.wait(timeout=40) == 0, "SIGTERM: the router exits 0")
    router, base = start_router(procs, ARGS.router, workers, *once, name="router4", ready=False)
    nt.wait_ready(router, base, time.time())
    check(loaded(base, "loaded") == 1, "the final snapshot was loaded")
    check(messages(base) == 0, f"nothing beyond the final snapshot ({messages(base):.0f})")
    st.wait_views(base, engines, "views from the final snapshot equal the dumps")
    first_repeat_hits(router, base, 1, "nats-snap-3")


def case_stale(procs, tmp):
    (nats, nats_port), engines, workers, path, flags = setup(procs, tmp)
    router, base = start_router(procs, ARGS.router, workers, *flags, "--kv-snapshot-interval-s",
                                "1", name="router1", ready=False)
    nt.traffic(base, 0, 8)
    st.wait_views(base, engines, "views warm")
    st.snapshot_after_now(base)
    router.p.kill()
    router.p.wait(timeout=10)
    nats.p.terminate()
    nats.p.wait(timeout=10)
    shutil.rmtree(os.path.join(tmp, "js"))  # the stream is gone: recreated at restart
    nt.start_nats(procs, nats_port, os.path.join(tmp, "js"), name="nats2")
    router, base = start_router(procs, ARGS.router, workers, *flags, name="router2", ready=False)
    nt.wait_ready(router, base, time.time())
    router.wait_line(r"kv-snapshot: refused .*: stream created differs .*; full replay")
    check(loaded(base, "refused_stream") == 1 and loaded(base, "loaded") == 0,
          "a recreated stream refuses the file (refused_stream)")
    check(start_seq(router) == 1, "the stream is consumed from its start")
    st.wait_views(base, engines, "views rebuilt from the recreated stream equal the dumps")
    first_repeat_hits(router, base, 0, "nats-stale")


def case_truncated(procs, tmp):
    # The relays create the stream holding its last 8 messages only.
    monitor = free_port()
    _, engines, workers, path, flags = setup(procs, tmp, "--nats-stream-max-msgs", "8",
                                             monitor_port=monitor)
    router, base = start_router(procs, ARGS.router, workers, *flags, "--kv-snapshot-interval-s",
                                "1", name="router1", ready=False)
    nt.traffic(base, 0, 4)
    st.wait_views(base, engines, "views warm")
    st.snapshot_after_now(base)
    handled = messages(base)  # router1 consumed from seq 1: its last stream seq, >= the file's
    router.p.kill()
    router.p.wait(timeout=10)
    # While the router is down the stream discards what came after the snapshot.
    for g in range(10, 22):
        f = engines[g % 2]
        check(nt.complete(f"http://127.0.0.1:{f['port']}", g) == 200, f"request {g} to an engine")

    def first_seq():
        _, body, _ = http("GET", f"http://127.0.0.1:{monitor}/jsz?streams=true")
        streams = json.loads(body)["account_details"][0]["stream_detail"]
        return streams[0]["state"]["first_seq"]
    poll(lambda: first_seq() > handled + 1, "the stream discarded the messages after the file")
    router, base = start_router(procs, ARGS.router, workers, *flags, name="router2", ready=False)
    nt.wait_ready(router, base, time.time())
    router.wait_line(r"kv-snapshot: refused .*: needs stream seq \d+, first is \d+; full replay")
    check(loaded(base, "refused_stream") == 1 and loaded(base, "loaded") == 0,
          "a stream that discarded what the file needs refuses it (refused_stream)")
    check(start_seq(router) == 1, "the stream is consumed from its start")
    first_repeat_hits(router, base, 21, "nats-truncated")  # a prompt the stream still holds


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--register", required=True)
    ap.add_argument("--case", choices=["warm", "stale", "truncated"], required=True)
    ARGS = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="infera-nats-snap-") as tmp, \
            Processes(log_dir=os.environ.get("INFERA_TEST_LOG_DIR")) as procs:
        {"warm": case_warm, "stale": case_stale, "truncated": case_truncated}[ARGS.case](procs, tmp)
    print(f"all passed in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
