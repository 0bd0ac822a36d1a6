#!/usr/bin/python3
"""Hostile upstreams and records against the real infera-router (issue 22, items 3-6 and
10-12): a worker record that points back at the router (directly, and through a relay
the address check cannot see), /v1/messages bodies of 300,000 blocks while /health is
polled, 300 MB answers (non-streamed JSON, one SSE line), an upstream 100 Continue, a
stream cut inside an event, error bodies and headers that must not leak addresses,
credentials or raw record bytes, and the HTTP details (obs-fold, Host, chunk
extensions, the mock engine under valgrind).

The hostile upstream is written here (raw sockets: interim responses, a body cut at a
chosen byte); it picks its behaviour from the request's "model", and the router is
given one --worker per behaviour, all at the same port. Real infera-mock-engines serve
the ordinary traffic. Every wait is a bounded poll. Exits non-zero on a failure.
Usage: upstream_test.py --router BIN --engine BIN [--only NAME,...] [--bigmsg-blocks N]
"""
import json
import os
import re
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Processes, check, free_port, http, parse_flags, poll, raw  # noqa: E402
from harness import recv_all, start_engine, worker_flag  # noqa: E402
from hostile_test import metric, run_tests  # noqa: E402

ARGS = None
SANITIZED = bool(os.environ.get("INFERA_SANITIZED"))
# 300 MB as the issue measured; 20 MiB under the sanitizers (same code paths, the
# 16 MiB event bound still crossed; 8 KiB reads cost ~1 ms each there), where RSS
# figures mean nothing anyway.
BIG = (20 << 20) if SANITIZED else 300_000_000
MIB = 1 << 20


# ----------------------------------------------------------------------------------
# The hostile upstream: one thread per connection, behaviour by the body's "model".

def _read_request(conn):
    """The request's head and body (Content-Length framing, as the router sends)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None, None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    length = int(m.group(1)) if m else 0
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body


def _chunk(data):
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _sse_event(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk_obj(text):
    return {"id": "h", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


class HostileUpstream:
    """Serves /v1/chat/completions badly on purpose; `seen` counts requests by model and
    keeps their heads (to check the hop header)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.heads = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            head, body = _read_request(conn)
            if head is None:
                return
            if head.startswith(b"GET "):
                # The router's health checks and start-up doctor: a healthy worker.
                self._get(conn, head)
                return
            self.heads.append(head)
            model = json.loads(body).get("model", "")
            getattr(self, "_" + model.replace("-", "_"))(conn)
        except (OSError, ValueError, AttributeError) as e:
            print("hostile upstream:", repr(e), flush=True)
        finally:
            conn.close()

    MODELS = ("continue", "huge-json", "huge-sse-line", "truncated-sse", "fail-500")

    @staticmethod
    def _get(conn, head):
        """GET /health: 200 {}; GET /v1/models: the models above; else 404."""
        path = head.split(b" ", 2)[1]
        if path == b"/health":
            body = b"{}"
        elif path == b"/v1/models":
            body = json.dumps({"object": "list", "data": [
                {"id": m, "object": "model"} for m in HostileUpstream.MODELS]}).encode()
        else:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)

    def _continue(self, conn):
        """100 Continue (and a 103) before the real answer."""
        body = json.dumps({"id": "c", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "after 100"},
             "finish_reason": "stop"}]}).encode()
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n"
                     b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n")
        time.sleep(0.05)  # a separate read: the interim head alone first
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)

    def _huge_json(self, conn):
        """A BIG-byte non-streamed answer, usage at its end."""
        head = b'{"id":"big","object":"chat.completion","choices":[{"index":0,"message":' \
               b'{"role":"assistant","content":"'
        tail = b'"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,' \
               b'"prompt_tokens_details":{"cached_tokens":0}}}'
        fill = BIG - len(head) - len(tail)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     str(BIG).encode() + b"\r\n\r\n" + head)
        piece = b"a" * MIB
        while fill > 0:
            n = min(fill, len(piece))
            conn.sendall(piece[:n])
            fill -= n
        conn.sendall(tail)

    def _huge_sse_line(self, conn):
        """One event, then a BIG-byte line that never ends."""
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" +
                     _chunk(_sse_event(_chunk_obj("first "))) + _chunk(b"data: {\"x\":\""))
        piece = _chunk(b"a" * MIB)
        for _ in range(BIG // MIB):
            conn.sendall(piece)

    def _truncated_sse(self, conn):
        """Two whole events, then part of a third, then the connection drops."""
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" +
                     _chunk(_sse_event(_chunk_obj("one ")) + _sse_event(_chunk_obj("two "))) +
                     _chunk(b'data: {"choi'))
        time.sleep(0.05)
        conn.shutdown(socket.SHUT_RDWR)

    def _fail_500(self, conn):
        body = b'{"error":{"message":"engine overloaded"}}'
        conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class Relay:
    """A TCP relay (a balancer between the router and a worker): the router's address
    check cannot see through it, the hop header must."""

    def __init__(self, target_port):
        self.target = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.posts = 0  # requests to the API (the router's health checks pass here too)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            a, _ = self.sock.accept()
            self.connections += 1
            try:
                b = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                a.close()
                continue
            for src, dst, inbound in ((a, b, True), (b, a, False)):
                threading.Thread(target=self._pump, args=(src, dst, inbound),
                                 daemon=True).start()

    def _pump(self, src, dst, inbound):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if inbound:
                    self.posts += data.count(b"POST /v1/")
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# ----------------------------------------------------------------------------------

def start_router(procs, name, workers, *extra, port="0", nofile=None):
    argv = [ARGS.router, "--host", "127.0.0.1", "--port", port, "--kv-event-transport", "none"]
    for w in workers:
        argv += ["--worker", w]
    proc = procs.start(name, argv + list(extra), nofile=nofile)
    port = int(proc.wait_line(r"infera-router listening on \S*:(\d+)").group(1))
    base = f"http://127.0.0.1:{port}"
    poll(lambda: http("GET", base + "/health")[0] == 200, f"{name} healthy")
    return proc, port, base


def hostile_worker(port, model):
    return f"http://127.0.0.1:{port},worker_id=hostile-{model},model_name={model}"


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
    return int(m.group(1)) / 1024


def chat(model, stream=False, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "stream": stream}
    body.update(extra)
    return body


def post_raw(port, path, body, timeout=60):
    """POST over a raw socket; returns (status, headers dict, body bytes), the chunked
    encoding removed."""
    data = json.dumps(body).encode()
    out = raw(port, b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Type: application/json\r\nContent-Length: " + str(len(data)).encode() +
              b"\r\n\r\n" + data, timeout=timeout)
    head, _, rest = out.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1]) if lines and lines[0].startswith(b"HTTP/") else 0
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.decode().lower()] = v.strip()
    if headers.get("transfer-encoding") == b"chunked":
        body_bytes, pos = b"", 0
        while True:
            eol = rest.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(rest[pos:eol].split(b";")[0], 16)
            if size == 0:
                break
            body_bytes += rest[eol + 2:eol + 2 + size]
            pos = eol + 2 + size + 2
        rest = body_bytes
    return status, headers, rest


def sse_events(data):
    """The events of an SSE body: each a dict of field -> joined value."""
    events = []
    for block in re.split(rb"\r?\n\r?\n", data):
        if not block.strip():
            continue
        ev = {}
        for line in block.split(b"\n"):
            k, _, v = line.rstrip(b"\r").partition(b":")
            ev.setdefault(k.decode(), []).append(v[1:] if v.startswith(b" ") else v)
        events.append({k: b"\n".join(v) for k, v in ev.items()})
    return events


# ----------------------------------------------------------------------------------
# Item 3: loops.

def test_self_record(procs, engine):
    """A record whose url is the router's own listen address (127.0.0.1, localhost,
    0.0.0.0 on the listen port) is refused at discovery, logged and counted; the router
    serves with the rest (before: one request became ~10,000)."""
    port = free_port()
    selfs = [f"http://{h}:{port},worker_id=self-{i},model_name=mock-model"
             for i, h in enumerate(("127.0.0.1", "localhost", "0.0.0.0"))]
    proc, _, base = start_router(procs, "router-self", [engine, *selfs], port=str(port))
    _, text, _ = http("GET", base + "/v1/workers")
    ids = [w["worker_id"] for w in json.loads(text)["workers"]]
    check(not any(i.startswith("self-") for i in ids), f"self-pointing records not added: {ids}")
    check(len(proc.grep(r"refused: its url .* is this router's own listen address")) == 3,
          "each refusal is logged")
    check(metric(base, 'infera_router_workers_refused_total{reason="self_address"}') == 3,
          "infera_router_workers_refused_total{reason=\"self_address\"} counts them")
    check(http("POST", base + "/v1/chat/completions", chat("mock-model"))[0] == 200,
          "the router serves with the engine")


def test_loop_through_relay(procs, engine):
    """A record that reaches the router through a relay (no address check can see it):
    the X-Infera-Via hop header makes the second pass a 508, so a request for a model
    only the loop serves fails fast (< 2 s) with few descriptors, and one the engine
    also serves succeeds (failover)."""
    port = free_port()
    relay = Relay(port)
    loop_only = f"http://127.0.0.1:{relay.port},worker_id=loop-a,model_name=loop-model"
    loop_shared = f"http://127.0.0.1:{relay.port},worker_id=loop-b,model_name=mock-model"
    proc, _, base = start_router(procs, "router-loop", [engine, loop_only, loop_shared],
                                 port=str(port))
    fds_before = open_fds(proc.p.pid)
    t0 = time.time()
    status, text, _ = http("POST", base + "/v1/chat/completions", chat("loop-model"), timeout=30)
    took = time.time() - t0
    fds = open_fds(proc.p.pid)
    print(f"loop: {status} in {took:.2f} s, fds {fds_before} -> {fds}, "
          f"relay connections {relay.connections}, requests {relay.posts}", flush=True)
    check(status == 502 and "routing loop" in text, f"the loop ends in a 502 naming it: {text}")
    check(took < 2.0, f"... fast ({took:.2f} s < 2 s)")
    check(fds < 500, f"... with {fds} descriptors (< 500)")
    check(relay.posts <= 3, f"one pass through the relay per attempt ({relay.posts})")
    check((metric(base, "infera_router_loops_detected_total") or 0) >= 1,
          "infera_router_loops_detected_total counts the refused pass")
    check(len(proc.grep(r"routing loop: it already passed through this router")) >= 1,
          "the loop is logged")
    err = json.loads(text)["error"]
    check("127.0.0.1" not in text and str(relay.port) not in text and str(port) not in text,
          f"the 502 names no address: {err['message']}")
    for _ in range(4):
        status, _, _ = http("POST", base + "/v1/chat/completions", chat("mock-model"), timeout=30)
        check(status == 200, "a model the engine serves too is answered (failover past the loop)")
    check(open_fds(proc.p.pid) < 500, "descriptors stay bounded")


# ----------------------------------------------------------------------------------
# Item 4: large bodies off the event loop.

def test_big_messages_off_loop(procs, engine):
    """Four /v1/messages bodies of many text blocks at once: parse, validation,
    translation and serialisation run on the work pool; /health answers meanwhile
    (before, with 300,000 blocks: 2.1 s of loop time each, /health stalled 7.6 s)."""
    _, port, base = start_router(procs, "router-bigmsg", [engine], "--threads", "2")
    # 100,000 blocks (2.7 MiB; --bigmsg-blocks 300000 is the reproduction,
    # ~3 CPU-s per request on the pool: too long for make test); 10,000 under the
    # sanitizers (same path; nlohmann::json is ~20 times slower there).
    n = int(ARGS.bigmsg_blocks) or (10_000 if SANITIZED else 100_000)
    blocks = [{"type": "text", "text": "x"} for _ in range(n)]
    data = json.dumps({"model": "mock-model", "max_tokens": 1,
                       "messages": [{"role": "user", "content": blocks}]}).encode()
    req = (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           b"Content-Type: application/json\r\nContent-Length: " + str(len(data)).encode() +
           b"\r\n\r\n" + data)
    answers = []

    def one():
        answers.append(raw(port, req, timeout=120))
    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    worst, probes, t_start = 0.0, 0, time.time()
    while any(t.is_alive() for t in threads):
        t0 = time.time()
        out = raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                  timeout=10)
        worst = max(worst, time.time() - t0)
        probes += 1
        check(out.startswith(b"HTTP/1.1 200"), "/health answers while the bodies are handled") \
            if probes == 1 else None
        time.sleep(0.05)
    for t in threads:
        t.join()
    print(f"/health during four {len(blocks)}-block /v1/messages ({len(data) >> 20} MiB each, "
          f"{time.time() - t_start:.1f} s): {probes} probes, worst {worst * 1000:.0f} ms",
          flush=True)
    # The engine may refuse a prompt beyond its KV cache (400): the router's part is
    # that each body was parsed, translated and routed, and the answer translated back.
    check(all(b"X-Infera-Worker-Id: " in a for a in answers),
          f"the four requests reached the engine ({[a[9:12] for a in answers]})")
    check(all(b'"type":"message"' in a or b'"type":"error"' in a for a in answers),
          "... and were answered in Anthropic's shape")
    if not SANITIZED:
        check(worst < 1.0, f"/health's worst wait {worst * 1000:.0f} ms (< 1 s; 7.6 s before)")


# ----------------------------------------------------------------------------------
# Items 5, 6, 10: the relay.

def test_interim_response(procs, hostile):
    """An upstream 100 Continue (and 103) before its 200: the 200 is relayed (before: the
    100 was taken as the answer and the client timed out)."""
    _, port, base = start_router(procs, "router-100", [hostile_worker(hostile.port, "continue")])
    status, text, _ = http("POST", base + "/v1/chat/completions", chat("continue"), timeout=10)
    check(status == 200 and "after 100" in text, f"the final 200 is relayed: {status} {text[:120]}")


def test_big_answers_bounded(procs, hostile):
    """BIG-byte answers, non-streamed JSON and one endless SSE line: the router relays the
    first as it arrives and cuts the second at --max-sse-event-bytes (16 MiB) with an
    in-band error; its peak RSS stays < 150 MB (before: 455 MB and 702 MB)."""
    proc, port, base = start_router(procs, "router-big",
                                    [hostile_worker(hostile.port, "huge-json"),
                                     hostile_worker(hostile.port, "huge-sse-line")])
    start_rss = peak_rss_mib(proc.p.pid)
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    data = json.dumps(chat("huge-json")).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Type: application/json\r\nContent-Length: " + str(len(data)).encode() +
              b"\r\n\r\n" + data)
    received, tail = 0, b""
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        received += len(chunk)
        tail = (tail + chunk)[-4096:]
    s.close()
    rss = peak_rss_mib(proc.p.pid)
    print(f"non-streamed {BIG} B: {received} B received in {time.time() - t0:.1f} s, router "
          f"peak RSS {start_rss:.0f} -> {rss:.0f} MiB", flush=True)
    check(received > BIG and b'"cached_tokens":0}}}' in tail,
          "the whole non-streamed answer is relayed, its end included")
    t0 = time.time()
    status, headers, body = post_raw(port, "/v1/chat/completions",
                                     chat("huge-sse-line", stream=True), timeout=60)
    events = sse_events(body)
    rss = peak_rss_mib(proc.p.pid)
    print(f"one {BIG} B SSE line: {len(body)} B to the client in {time.time() - t0:.1f} s, "
          f"router peak RSS {rss:.0f} MiB", flush=True)
    check(status == 200 and len(events) == 2, f"two events reach the client ({len(events)})")
    check(json.loads(events[0]["data"])["choices"][0]["delta"]["content"] == "first ",
          "the whole event before the long line")
    err = json.loads(events[1]["data"])
    check("larger than 16777216 bytes" in err["error"]["message"],
          f"then one parseable error event: {err}")
    check(metric(base, 'infera_router_relay_cut_total{reason="sse_event_too_large"}') == 1,
          "infera_router_relay_cut_total{reason=\"sse_event_too_large\"} counts it")
    check(len(proc.grep(r"sent an SSE event over --max-sse-event-bytes")) == 1, "it is logged")
    if not SANITIZED:
        check(rss < 150, f"router peak RSS {rss:.0f} MiB < 150 MiB")
    poll(lambda: metric(base, "infera_request_inflight") == 0, "in-flight gauge back to 0")


def test_truncated_stream(procs, hostile):
    """An upstream stream cut inside an event: the client gets the whole events, then one
    parseable error event; no partial event before it (before: the error was glued onto
    the partial line, 'data: {"choidata: {"error"...'). Both APIs."""
    _, port, base = start_router(procs, "router-trunc",
                                 [hostile_worker(hostile.port, "truncated-sse")])
    status, _, body = post_raw(port, "/v1/chat/completions", chat("truncated-sse", stream=True))
    events = sse_events(body)
    check(status == 200 and len(events) == 3, f"OpenAI: three events ({body[-300:]!r})")
    datas = [json.loads(e["data"]) for e in events]  # each parses: nothing glued
    check([d["choices"][0]["delta"]["content"] for d in datas[:2]] == ["one ", "two "],
          "the two whole events")
    check("error" in datas[2] and b'{"choi\n' not in body and b'"choidata' not in body,
          f"then one error event, nothing of the partial one: {datas[2]}")
    check("127.0.0.1" not in datas[2]["error"]["message"], "naming no address")
    status, _, body = post_raw(port, "/v1/messages",
                               {"model": "truncated-sse", "max_tokens": 4, "stream": True,
                                "messages": [{"role": "user", "content": "hi"}]})
    events = sse_events(body)
    for e in events:
        json.loads(e["data"])
    check(status == 200 and events[-1].get("event") == b"error",
          f"Anthropic: every event parses, the last is the error ({len(events)} events)")
    check(b'"choi' not in body, "no partial event reaches the client")


# ----------------------------------------------------------------------------------
# Item 11: leaks.

def test_no_leaks(procs, hostile):
    """Clients never see internal addresses, URL credentials or raw record bytes; the
    operator's log has the detail, with the request id."""
    dead = free_port()
    rec = [{"url": f"http://127.0.0.1:{dead}", "worker_id": f"10.9.8.7:{dead}",
            "model_name": "dead-model"},
           {"url": f"http://127.0.0.1:{hostile.port}", "worker_id": "w\u0001\u007fx",
            "model_name": "fail-500"},
           {"url": f"http://127.0.0.1:{hostile.port}", "worker_id": "ok-500",
            "model_name": "fail-500"}]
    wfile = os.path.join(procs.dir, "workers.json")
    with open(wfile, "w") as f:
        json.dump(rec, f)
    # A record with credentials in its url: refused at start-up, the password not echoed.
    rc, out = procs.run("router-creds", [ARGS.router, "--port", "0", "--kv-event-transport",
                                         "none", "--worker",
                                         f"http://admin:s3cret@127.0.0.1:{dead},model_name=m"],
                        timeout=30)
    check(rc != 0 and "user info" in out, f"a url with credentials is refused (exit {rc})")
    rc, out = procs.run("router-badid", [ARGS.router, "--port", "0", "--kv-event-transport",
                                         "none", "--workers-file", wfile], timeout=30)
    check(rc != 0 and "visible ASCII" in out,
          f"a worker_id with control bytes is refused (exit {rc})")
    del rec[1]
    with open(wfile, "w") as f:
        json.dump(rec, f)
    proc, port, base = start_router(procs, "router-leaks", [], "--workers-file", wfile)
    for model in ("dead-model", "fail-500"):
        rid = f"leak-{model}"
        data = json.dumps(chat(model)).encode()
        out = raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"X-Infera-Request-Id: " + rid.encode() + b"\r\nContent-Length: " +
                  str(len(data)).encode() + b"\r\n\r\n" + data)
        check(out.startswith(b"HTTP/1.1 502"), f"{model}: 502 ({out[:300]!r})")
        for secret in (b"127.0.0.1", b"10.9.8.7", str(dead).encode(), str(hostile.port).encode(),
                       b"resolve", b"connect "):
            check(secret not in out, f"{model}: the answer does not contain {secret!r}")
        check(len(proc.grep(rf"request {rid}: .*(127\.0\.0\.1|10\.9\.8\.7|ok-500)")) >= 1,
              f"{model}: the log line with the request id has the detail")
    status, text, headers = http("POST", base + "/v1/chat/completions", chat("fail-500"))
    check(json.loads(text)["error"]["message"] == "the worker answered 500: engine overloaded",
          f"a worker's 5xx message is relayed without the worker's address: {text}")


# ----------------------------------------------------------------------------------
# Item 12: HTTP details.

def test_http_details(procs, engine):
    """obs-fold Content-Length -> 400; no Host or two -> 400; chunk extensions count
    against --max-body-bytes -> 413."""
    _, port, _ = start_router(procs, "router-http", [engine], "--max-body-bytes", "4096")
    body = b'{"model":"mock-model","messages":[{"role":"user","content":"x"}],"max_tokens":1}'
    out = raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    check(out.startswith(b"HTTP/1.1 400") and b"obs-fold" in out, f"folded Content-Length: 400 "
          f"({out[:160]!r})")
    for what, head in (("no Host", b""), ("two Hosts", b"Host: a\r\nHost: b\r\n")):
        out = raw(port, b"POST /v1/chat/completions HTTP/1.1\r\n" + head + b"Content-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        check(out.startswith(b"HTTP/1.1 400") and b"Host header" in out, f"{what}: 400")
    ext = b";" + b"e" * 8000
    out = raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n" + b"%x" % len(body) + ext + b"\r\n" + body +
              b"\r\n0\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 413"),
          f"8,000 bytes of chunk extensions over --max-body-bytes 4096: 413 ({out[:100]!r})")


def test_engine_valgrind(procs):
    """The mock engine's engine hashes read no uninitialised memory (XXH3 state): a
    completions request with KV events under valgrind reports no error."""
    if SANITIZED or not os.path.exists("/usr/bin/valgrind"):
        print("skip [valgrind]: sanitized build or no valgrind", flush=True)
        return
    port = free_port()
    log = os.path.join(procs.dir, "valgrind.txt")
    proc = procs.start("engine-valgrind", [
        "valgrind", "--error-exitcode=9", f"--log-file={log}", ARGS.engine, "--host",
        "127.0.0.1", "--port", str(port), "--model-name", "mock-model", "--kv-events-endpoint",
        "tcp://127.0.0.1:0", "--speedup", "100", "--kv-events-hash-seed", "7"])
    proc.wait_line(r"infera-mock-engine listening", timeout=120)
    status, _, _ = http("POST", f"http://127.0.0.1:{port}/v1/completions",
                        {"model": "mock-model", "prompt": list(range(64)), "max_tokens": 2},
                        timeout=120)
    check(status == 200, "the engine under valgrind served a request")
    proc.p.terminate()
    proc.p.wait(timeout=60)
    with open(log) as f:
        report = f.read()
    m = re.search(r"ERROR SUMMARY: (\d+) errors", report)
    check(m is not None and m.group(1) == "0" and "uninitialised" not in report,
          f"valgrind: {m.group(0) if m else report[-400:]}")


def main():
    global ARGS
    ARGS = parse_flags("router", "engine", only="", bigmsg_blocks="0")
    with Processes() as procs:
        _, f = start_engine(procs, ARGS.engine, "engine", "--speedup", "50")
        engine = worker_flag(f)
        hostile = HostileUpstream()
        tests = [
            ("self", lambda: test_self_record(procs, engine)),
            ("loop", lambda: test_loop_through_relay(procs, engine)),
            ("bigmsg", lambda: test_big_messages_off_loop(procs, engine)),
            ("interim", lambda: test_interim_response(procs, hostile)),
            ("big", lambda: test_big_answers_bounded(procs, hostile)),
            ("truncated", lambda: test_truncated_stream(procs, hostile)),
            ("leaks", lambda: test_no_leaks(procs, hostile)),
            ("http", lambda: test_http_details(procs, engine)),
            ("valgrind", lambda: test_engine_valgrind(procs)),
        ]
        if not run_tests(procs, tests, ARGS.only):
            return 1
    print("upstream_test: all passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
