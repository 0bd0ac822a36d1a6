#!/usr/bin/python3
"""Router replicas sharing in-flight load over NATS (--router-replica-sync, issue 16,
doc/replica-sync.md).

Real processes on free ports: Debian's nats-server (core NATS), two slow
infera-mock-engines, three infera-routers A, B, C with --router-replica-sync and
otherwise default flags (default replica ids, heartbeat 1 s, TTL 3 s). Bounded polls
only.

1. Every replica counts the two others as peers.
2. Streams held open through A: B's and C's /v1/workers show, per target,
   remote_active_blocks equal to A's own active_blocks (and A shows none remote).
3. One more stream through B: C sees A's + B's, A sees B's; B's stream closed: its
   load is gone from A and C (a delta), A's stays.
4. Hostile messages on the sync subjects (garbage, a forged target count of 2^32-1,
   a negative snapshot) are counted as rejected; the load views do not change.
5. kill -9 A with its streams open: its load is gone from B and C within the TTL
   (plus one flush), peers drop to 1, infera_router_replica_expired_total counts it.
6. nats-server restarted on the same port: B and C reconnect and agree again.
"""
import http.client as httpclient
import json
import os
import re
import socket
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, check, free_port, http, metric, parse_flags, poll,  # noqa: E402
                     start_engine, start_router, worker_flag)

ARGS = parse_flags("router", "engine")
TTL_S = 3.0  # the default --router-replica-ttl-ms
BLOCKS = 8   # full 16-token blocks per prompt


def prompt(g):
    return [100000 * (g + 1) + i for i in range(1, 16 * BLOCKS + 1)]


def open_stream(base, g):
    """A streamed completion held open (long at --speedup 1); returns the connection
    once the head arrived (the router has picked and booked by then)."""
    port = int(base.rsplit(":", 1)[1])
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"model": "mock-model", "prompt": prompt(g), "max_tokens": 20000, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    check(resp.status == 200, f"stream {g} through {base} answers 200")
    resp.readline()  # the first chunk: the request is in the engine
    return conn


def targets(base):
    """{target: (active_blocks, remote_active_blocks)} from /v1/workers."""
    status, body, _ = http("GET", base + "/v1/workers")
    if status != 200:
        return None
    out = {}
    for w in json.loads(body)["workers"]:
        for t in w["targets"]:
            out[t["target"]] = (t["active_blocks"], t["remote_active_blocks"])
    return out


def own(base):
    return {t: v[0] for t, v in targets(base).items()}


def remote(base):
    return {t: v[1] for t, v in targets(base).items()}


def add(*loads):
    out = {}
    for load in loads:
        for t, v in load.items():
            out[t] = out.get(t, 0) + v
    return out


def nats_publish(port, subject, payloads):
    """Publishes raw payloads with NATS's text protocol (no client library)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.recv(4096)  # INFO
    out = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
    for p in payloads:
        out += b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(p), p)
    s.sendall(out + b"PING\r\n")
    data = b""
    while b"PONG" not in data:  # the server has processed every PUB before its PONG
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()


def rejected(base):
    _, text, _ = http("GET", base + "/metrics")
    m = re.search(r'^infera_router_replica_messages_total\{direction="in",kind="rejected"\} (\S+)$',
                  text, re.M)
    return float(m.group(1)) if m else None


def main():
    with Processes() as procs:
        nats_port = free_port()
        nats = procs.start("nats", ["nats-server", "-a", "127.0.0.1", "-p", str(nats_port)])
        nats.wait_line(r"Server is ready")
        url = f"nats://127.0.0.1:{nats_port}"
        workers = []
        for i in range(2):
            _, f = start_engine(procs, ARGS.engine, f"engine{i}", "--speedup", "1",
                                "--num-gpu-blocks", "4096")
            workers.append(worker_flag(f))
        routers = {}
        for name in ("A", "B", "C"):
            proc, base = start_router(procs, ARGS.router, workers, "--router-replica-sync",
                                      "--nats-server", url, name=f"router-{name}")
            routers[name] = (proc, base)
        A, B, C = (routers[n][1] for n in ("A", "B", "C"))

        for name, (_, base) in routers.items():
            poll(lambda b=base: metric(b, "infera_router_replica_peers") == 2,
                 f"replica {name} counts two peers")

        # 2. A's in-flight load is seen by B and C, target by target.
        a_streams = [open_stream(A, g) for g in range(3)]
        a_load = own(A)
        check(sum(a_load.values()) == 3 * BLOCKS, f"A holds {3 * BLOCKS} active blocks: {a_load}")
        for name, base in (("B", B), ("C", C)):
            poll(lambda b=base: remote(b) == a_load, f"{name}'s remote load equals A's own {a_load}")
        check(sum(remote(A).values()) == 0, "A counts no remote load")

        # 3. B's stream adds to what A and C see, and its release is gone again.
        b_stream = open_stream(B, 10)
        b_load = own(B)
        check(sum(b_load.values()) == BLOCKS, f"B holds {BLOCKS} active blocks: {b_load}")
        poll(lambda: remote(C) == add(a_load, b_load), "C sees A's and B's load")
        poll(lambda: remote(A) == b_load, "A sees B's load")
        b_stream.close()
        poll(lambda: sum(own(B).values()) == 0, "B released its stream")
        poll(lambda: remote(C) == a_load and sum(remote(A).values()) == 0,
             "B's released load is gone from A and C")

        # 4. Hostile messages: rejected and counted, nothing changes.
        forged = (b"\x87\xa1v\x01\xa7replica\xa4evil\xa5epoch\x01\xa3seq\x01\xa4kind\xa5delta"
                  b"\xa5ts_ms\x01\xa7targets\xdd\xff\xff\xff\xff")
        negative = (b"\x87\xa1v\x01\xa7replica\xa4evil\xa5epoch\x01\xa3seq\x01\xa4kind"
                    b"\xa8snapshot\xa5ts_ms\x01\xa7targets\x91\x96\xa1w\x00\xff\x00\x00\x00")
        before = rejected(C)
        nats_publish(nats_port, "infera.router.load.ZXZpbA", [b"garbage", forged, negative, b""])
        poll(lambda: rejected(C) >= before + 4, "C rejected the four hostile messages")
        check(remote(C) == a_load and metric(C, "infera_router_replica_peers") == 2,
              "C's view of its peers is unchanged")

        # 5. A dies without a word: its load expires from B and C.
        routers["A"][0].p.kill()
        killed = time.time()
        for name, base in (("B", B), ("C", C)):
            poll(lambda b=base: sum(remote(b).values()) == 0, f"A's load expired from {name}",
                 timeout=TTL_S + 10)
        elapsed = time.time() - killed
        print(f"A's load expired from B and C {elapsed:.2f} s after kill -9 (TTL {TTL_S} s)",
              flush=True)
        check(elapsed >= TTL_S - 1.0, "not before the TTL (less one heartbeat)")
        for name, base in (("B", B), ("C", C)):
            check(metric(base, "infera_router_replica_peers") == 1, f"{name} counts one peer")
            check(metric(base, "infera_router_replica_expired_total") >= 1,
                  f"{name} counted A's expiry")
        for s in a_streams:
            s.close()

        # 6. NATS restarts: the replicas reconnect, resend snapshots and agree again.
        nats.p.terminate()
        nats.p.wait(timeout=10)
        nats = procs.start("nats2", ["nats-server", "-a", "127.0.0.1", "-p", str(nats_port)])
        nats.wait_line(r"Server is ready")
        b_stream = open_stream(B, 20)
        b_load = own(B)
        poll(lambda: remote(C) == b_load, "after a NATS restart C sees B's load again",
             timeout=TTL_S + 10)
        b_stream.close()
        poll(lambda: sum(remote(C).values()) == 0, "and its release")
    print("replica sync: ok")


if __name__ == "__main__":
    main()
