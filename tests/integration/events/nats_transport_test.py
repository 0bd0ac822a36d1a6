#!/usr/bin/python3
"""KV events over NATS JetStream, and warm restarts (issue 16, doc/nats-transport.md).

Real processes on free ports: Debian's nats-server (JetStream, file store in a temp
dir), infera-mock-engine, infera-register --kv-relay nats --relay-only, infera-router.
Bounded polls only.

  --case relay  the router's view (/v1/admin/cache-view) equals the engine's dump
                (/debug/kv-blocks) through relay + JetStream; again after an engine
                restart, a NATS restart (batches published meanwhile), and with an
                engine dropping 30% of its live batches (the relay replays the gaps); an
                engine that restarts and stays idle (while the relay runs, while it is
                away, and after a relay started while the engine was down): the
                router's view of it empties (the relay's clear marker)
  --case warm   kill -9 the router under traffic and start it again, over ZMQ (the
                engines' replay sockets) and over JetStream: /ready says "starting"
                until the views are rebuilt, and the first request with a cached
                prefix has pick log cache_hits > 0; prints the time to ready; then an
                engine that restarts and stays idle behind a ZMQ router: the router's
                view of it empties (the ingestor's reconnect probe)
"""
import argparse
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, free_port, http, poll, start_router, worker_flag  # noqa: E402

ARGS = None
PROMPT_BLOCKS = 8  # 8 full 16-token blocks per prompt


def prompt(g):
    return [100000 * (g + 1) + i for i in range(1, 16 * PROMPT_BLOCKS + 1)]


def start_nats(procs, port, store, name="nats", *extra):
    proc = procs.start(name, ["nats-server", "-js", "-sd", store, "-a", "127.0.0.1",
                              "-p", str(port), *extra])
    proc.wait_line(r"Server is ready")
    return proc


def start_engine(procs, name, ports, *extra):
    """A mock engine on fixed ports (so a restarted one is the same worker)."""
    http_port, events, replay = ports
    proc = procs.start(name, [ARGS.engine, "--host", "127.0.0.1", "--port", str(http_port),
                              "--model-name", "mock-model", "--num-gpu-blocks", "65536",
                              "--speedup", "50",
                              "--kv-events-endpoint", f"tcp://127.0.0.1:{events}",
                              "--kv-replay-endpoint", f"tcp://127.0.0.1:{replay}", *extra])
    line = proc.wait_line(r"infera-mock-engine listening .*").group(0)
    return proc, dict(kv.split("=", 1) for kv in line.split()[2:] if "=" in kv)


def start_relay(procs, fields, nats_url, name="relay", *extra):
    wid = f"127.0.0.1:{fields['port']}"
    proc = procs.start(name, [ARGS.register, "--kv-relay", "nats", "--relay-only",
                              "--nats-server", nats_url, "--url", f"http://{wid}",
                              "--worker-id", wid, "--model-name", "mock-model",
                              "--kv-events-endpoint", fields["events"],
                              "--kv-replay-endpoint", fields["replay"], *extra])
    proc.wait_line(r"relaying KV events")
    return proc


def complete(base, g, request_id=None, timeout=30):
    body = json.dumps({"model": "mock-model", "prompt": prompt(g), "max_tokens": 2}).encode()
    headers = {"Content-Type": "application/json"}
    if request_id:
        headers["X-Infera-Request-Id"] = request_id
    req = urllib.request.Request(base + "/v1/completions", data=body, headers=headers,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def engine_blocks(fields):
    _, b, _ = http("GET", f"http://127.0.0.1:{fields['port']}/debug/kv-blocks")
    return json.loads(b)["ranks"][0]["block_count"]


def router_blocks(base, fields):
    status, b, _ = http("GET", f"{base}/v1/admin/cache-view/127.0.0.1:{fields['port']}")
    return json.loads(b).get("block_count") if status == 200 else None


def metric(base, name):
    _, text, _ = http("GET", base + "/metrics")
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def views_equal(base, fields, what, nudge=None):
    """Polls until the router's view of `fields`' engine equals its dump. nudge(): one
    more request, for an engine that drops live batches (a dropped last batch shows as a
    gap only when the next one arrives)."""
    def same():
        e = engine_blocks(fields)
        if e > 0 and router_blocks(base, fields) == e:
            return True
        if nudge:
            nudge()
        return False
    poll(same, what, timeout=20, interval=0.1 if nudge else 0.05)


def traffic(base, first, count):
    """Requests `first`.. in turn; each is sent again until it succeeds (bounded): after an
    engine restart the router's health check may hold the worker out of picks until it
    answers a probe again (a Debug+ASan engine under load is down for seconds)."""
    for g in range(first, first + count):
        poll(lambda: complete(base, g) == 200, f"request {g} through the router",
             interval=0.1)


def case_relay(procs, tmp):
    nats_port = free_port()
    nats_url = f"nats://127.0.0.1:{nats_port}"
    nats = start_nats(procs, nats_port, os.path.join(tmp, "js"))
    ports = (free_port(), free_port(), free_port())
    engine, f = start_engine(procs, "engine", ports)
    relay = start_relay(procs, f, nats_url)
    router, base = start_router(procs, ARGS.router, [worker_flag(f)],
                                "--kv-event-transport", "nats", "--nats-server", nats_url)
    poll(lambda: http("GET", base + "/ready")[0] == 200, "router ready")
    traffic(base, 0, 6)
    views_equal(base, f, "router view equals the engine's dump through JetStream")

    def resyncs():
        return ((metric(base, "infera_kv_events_restarts_total") or 0) +
                (metric(base, "infera_kv_events_gaps_total") or 0))

    # An engine restart the relay does not see: it is stopped while the engine restarts
    # and sends as many batches as the old one did, so the first batch it sees when it
    # resumes can continue the old seq (and the block counts then compare equal with the
    # old blocks still in view). It must resync all the same: it checks the engine's
    # buffer at its last seq after every reconnect (at the reconnect itself: no request
    # is sent while waiting).
    relay.p.send_signal(signal.SIGSTOP)
    engine.p.terminate()
    engine.p.wait(timeout=10)
    engine, f = start_engine(procs, "engine-b", ports)
    traffic(base, 30, 6)
    relay.p.send_signal(signal.SIGCONT)
    relay.wait_line(r"reconnected to its engine's event stream")
    poll(lambda: resyncs() >= 1, "the router resynced after the unseen engine restart")
    views_equal(base, f, "equal after an engine restart the relay did not see")

    # Engine restart: same ports, empty cache, sequence from 0 again.
    before = resyncs()
    engine.p.terminate()
    engine.p.wait(timeout=10)
    engine, f = start_engine(procs, "engine2", ports)
    traffic(base, 10, 3)
    # Batches sent before the relay's SUB reconnected reach it through the replay socket
    # when it reconnects (it probes the engine's buffer from the last seq it relayed).
    views_equal(base, f, "equal again after an engine restart")
    # The router resynced on the new epoch: as a restart (seq 0 after a higher one, or the
    # relay's clear marker) or, when the relay's resend from 0 overtook the live batch, as
    # a gap. (The counter is read again until it shows: the view and the metric are read
    # separately.)
    poll(lambda: resyncs() > before,
         "the router saw the restart (a restart or a gap, then the resync)")

    # Idle engine restart: the restarted engine publishes nothing (no request reaches
    # it). The relay notices at its SUB's reconnect (the engine's buffer no longer holds
    # the last seq relayed, it is empty) and publishes its clear marker: the router's
    # view of the engine empties (no stale blocks to route to) and it counts a restart.
    def idle_restart(name, what, relay_name=None, relay_first=False, timeout=20):
        """Restarts the engine (stopping the relay and starting `relay_name` when given,
        before or after the engine); the engine publishes nothing: the router's view of
        it must empty and its restarts + gaps count move."""
        nonlocal engine, f, relay
        check(router_blocks(base, f) > 0, f"the router holds the engine's blocks ({what})")
        if relay_name:
            relay.p.terminate()
            relay.p.wait(timeout=10)
        before = resyncs()
        engine.p.terminate()
        engine.p.wait(timeout=10)
        if relay_first:
            relay = start_relay(procs, f, nats_url, name=relay_name)
            relay.wait_line(r"replay from \d+ at .* failed")  # the engine is down
        engine, f = start_engine(procs, name, ports)
        if relay_name and not relay_first:
            relay = start_relay(procs, f, nats_url, name=relay_name)
        poll(lambda: router_blocks(base, f) == 0 and resyncs() > before,
             f"the router's view cleared, a restart counted ({what})", timeout=timeout)
        check(engine_blocks(f) == 0, f"the engine stayed idle ({what})")

    idle_restart("engine3", "an idle engine restart while the relay runs")

    # The same while the relay is away: it stops, the engine restarts and stays idle, a
    # new relay starts. JetStream holds nothing newer than the old engine's last seq and
    # the engine's buffer lacks that seq: the new relay publishes the clear marker.
    traffic(base, 70, 3)
    views_equal(base, f, "equal before the engine restarts while the relay is away")
    idle_restart("engine4", "an idle engine restart while the relay was away", "relay-b")

    # And a relay that starts while its engine is down (its start replay gets no answer)
    # probes when its SUB connects to the engine, restarted and idle.
    traffic(base, 80, 3)
    views_equal(base, f, "equal before the engine restarts after the relay")
    idle_restart("engine5", "an idle engine restarted after the relay started", "relay-c",
                 relay_first=True, timeout=40)

    # NATS restart: batches published while it is down reach the router afterwards.
    nats.p.terminate()
    nats.p.wait(timeout=10)
    traffic(base, 20, 4)
    start_nats(procs, nats_port, os.path.join(tmp, "js"), name="nats2")
    views_equal(base, f, "equal again after a NATS restart (batches sent meanwhile)")

    # Dropped live batches: the relay replays each gap before publishing on.
    ports2 = (free_port(), free_port(), free_port())
    _, f2 = start_engine(procs, "lossy", ports2, "--drop-event-fraction", "0.3", "--seed", "7")
    start_relay(procs, f2, nats_url, name="relay2")
    router.p.terminate()
    router.p.wait(timeout=10)
    router, base = start_router(procs, ARGS.router, [worker_flag(f), worker_flag(f2)],
                                "--kv-event-transport", "nats", "--nats-server", nats_url,
                                name="router2")
    gaps_before = metric(base, "infera_kv_events_gaps_total")
    for g in range(30, 42):
        check(complete(f"http://127.0.0.1:{f2['port']}", g) == 200, f"request {g} to the lossy engine")
    _, text, _ = http("GET", f"http://127.0.0.1:{f2['port']}/metrics")
    dropped = re.search(r"^infera_mock_kv_event_batches_dropped_total\S* (\S+)$", text, re.M)
    check(dropped and float(dropped.group(1)) > 0, "the lossy engine dropped live batches")
    extra_group = [100]

    def nudge():
        extra_group[0] += 1
        complete(f"http://127.0.0.1:{f2['port']}", extra_group[0])
    views_equal(base, f2, "equal with 30% of live batches dropped (relay replayed the gaps)",
                nudge=nudge)
    views_equal(base, f, "the first engine's view rebuilt by a new router from the stream")
    check(metric(base, "infera_kv_events_gaps_total") == gaps_before,
          "no gap reached the router: the stream is complete")


def wait_ready(proc, base, t0):
    """Polls /ready until 200; returns (ms from process start, statuses seen)."""
    seen = set()

    def ready():
        try:
            status, body, _ = http("GET", base + "/ready", timeout=5)
        except OSError:
            return False
        seen.add(json.loads(body)["status"])
        return status == 200
    poll(ready, "router ready (/ready 200)", timeout=30, interval=0.005)
    return (time.time() - t0) * 1000, seen


def kill_under_traffic_and_restart(procs, router, base, workers, extra, name, groups):
    stop = threading.Event()
    done = []

    def load():
        g = 0
        while not stop.is_set():
            try:
                if complete(base, groups[g % len(groups)], timeout=5) == 200:
                    done.append(g)
            except OSError:  # the router dies under us: expected
                pass
            g += 1
    t = threading.Thread(target=load, daemon=True)
    t.start()
    poll(lambda: len(done) >= 3, "traffic flows through the router")
    router.p.kill()  # SIGKILL: no drain, no goodbye
    router.p.wait(timeout=10)
    stop.set()
    t.join(timeout=10)
    t0 = time.time()
    router, base = start_router(procs, ARGS.router, workers, *extra, name=name, ready=False)
    ms, seen = wait_ready(router, base, t0)
    rid = f"warm-{name}"
    check(complete(base, groups[0], request_id=rid) == 200, "first request after the restart")
    line = router.wait_line(rf"pick .*request_id={rid} .*").group(0)
    hits = int(re.search(r"cache_hits=(\d+)", line).group(1))
    check(hits > 0, f"first request after restart is a cache hit: {line}")
    return router, base, ms, hits, seen


def warm_restart(procs, router, base, engines, extra, label, groups):
    """Waits for a warm view, kills the router under traffic, restarts it, checks the
    first request hits and the view is complete again; prints the time to ready."""
    workers = [worker_flag(f) for f in engines]
    for f in engines:
        poll(lambda f=f: router_blocks(base, f) == engine_blocks(f), f"{label} view warm")
    router, base, ms, hits, seen = kill_under_traffic_and_restart(
        procs, router, base, workers, extra, f"{label}-router2", groups)
    blocks = sum(engine_blocks(f) for f in engines)
    print(f"warm restart {label}: ready {ms:.0f} ms after start ({blocks} engine blocks, "
          f"/ready said {sorted(seen)}), first request cache_hits={hits}", flush=True)
    for f in engines:
        poll(lambda f=f: router_blocks(base, f) == engine_blocks(f),
             f"restarted {label} router's view is complete")
    return router, base


def case_warm(procs, tmp):
    # ZMQ: the router asks each engine's replay socket for its buffer before ready.
    ports = [(free_port(), free_port(), free_port()) for _ in range(2)]
    started = [start_engine(procs, f"engine{i}", ports[i]) for i in range(2)]
    engines = [f for _, f in started]
    workers = [worker_flag(f) for f in engines]
    router, base = start_router(procs, ARGS.router, workers, name="zmq-router", ready=False)
    groups = list(range(ARGS.groups))
    traffic(base, 0, len(groups))
    router, base = warm_restart(procs, router, base, engines, [], "zmq", groups)
    check(metric(base, "infera_kv_events_replays_total") >= 2, "one replay per engine at start")
    router.p.terminate()
    router.p.wait(timeout=10)

    # NATS: the router replays the stream before ready.
    nats_port = free_port()
    nats_url = f"nats://127.0.0.1:{nats_port}"
    nats = start_nats(procs, nats_port, os.path.join(tmp, "js"))
    for i, f in enumerate(engines):
        start_relay(procs, f, nats_url, name=f"relay{i}")
    extra = ["--kv-event-transport", "nats", "--nats-server", nats_url]
    router, base = start_router(procs, ARGS.router, workers, *extra, name="nats-router",
                                ready=False)
    router, base = warm_restart(procs, router, base, engines, extra, "nats", groups)

    # NATS unreachable at start: "starting" until the stream is replayed.
    router.p.terminate()
    router.p.wait(timeout=10)
    nats.p.terminate()
    nats.p.wait(timeout=10)
    router, base = start_router(procs, ARGS.router, workers, *extra, name="nats-router-cold",
                                ready=False)
    status, body, _ = http("GET", base + "/ready")
    check(status == 503 and json.loads(body)["status"] == "starting",
          f"/ready says starting while JetStream is unreachable: {status} {body}")
    status, body, _ = http("GET", base + "/health")
    check(status == 200 and json.loads(body)["status"] == "ok",
          f"/health (liveness) says ok meanwhile: {status} {body}")
    start_nats(procs, nats_port, os.path.join(tmp, "js"), name="nats2")
    poll(lambda: http("GET", base + "/ready")[0] == 200, "ready once the stream is replayed")
    for f in engines:
        check(router_blocks(base, f) == engine_blocks(f), "view complete when ready")

    # --ready-after-replay false: ready at once (the views fill in the background).
    router.p.terminate()
    router.p.wait(timeout=10)
    router, base = start_router(procs, ARGS.router, workers, *extra, "--ready-after-replay",
                                "false", name="nats-router3")
    status, body, _ = http("GET", base + "/ready")
    check(status == 200 and json.loads(body)["status"] == "ready",
          "--ready-after-replay false: /ready at once")

    # ZMQ again: an engine that restarts and then publishes nothing. No live batch
    # reveals the restart; the router's ingestor probes the engine's replay socket when
    # its SUB reconnects (doc/kv-events.md §4 "Reconnect probe"): the view of the engine
    # empties and a restart is counted (before the probe its old blocks stayed).
    router.p.terminate()
    router.p.wait(timeout=10)
    router, base = start_router(procs, ARGS.router, workers, name="zmq-router3")
    f = engines[0]
    check(complete(f"http://127.0.0.1:{f['port']}", 200) == 200, "a request to engine0")
    poll(lambda: (router_blocks(base, f) or 0) > 0 and router_blocks(base, f) == engine_blocks(f),
         "the ZMQ router holds engine0's blocks")
    restarts = metric(base, "infera_kv_events_restarts_total") or 0
    started[0][0].p.terminate()
    started[0][0].p.wait(timeout=10)
    _, f = start_engine(procs, "engine0-b", ports[0])
    poll(lambda: router_blocks(base, f) == 0 and
         (metric(base, "infera_kv_events_restarts_total") or 0) > restarts,
         "the ZMQ router's view of the idle restarted engine cleared, a restart counted",
         timeout=20)
    check(engine_blocks(f) == 0, "the restarted engine stayed idle")
    print("zmq idle engine restart: the router's view cleared without a live batch", flush=True)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--register", required=True)
    ap.add_argument("--case", choices=["relay", "warm"], required=True)
    ap.add_argument("--groups", type=int, default=8,
                    help="warm: distinct cached prompts before the kill (8 blocks each)")
    ARGS = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="infera-nats-") as tmp, \
            Processes(log_dir=os.environ.get("INFERA_TEST_LOG_DIR")) as procs:
        {"relay": case_relay, "warm": case_warm}[ARGS.case](procs, tmp)
    print(f"all passed in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
