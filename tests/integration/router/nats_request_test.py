#!/usr/bin/python3
"""The NATS request transport end to end (issue 26, doc/nats-request-transport.md).

Real processes on free ports: Debian's nats-server -js, infera-mock-engine (HTTP only,
or serving NATS itself with --request-transport nats), infera-register
--request-transport nats (the sidecar in front of an engine's HTTP), infera-router
--request-transport nats with otherwise default flags (except where a case is about
one). A worker the test plays itself speaks NATS through tests/integration/nats_peer.py
(the documented client protocol on a raw socket). Bounded polls only.

  --case serve   a mixed fleet: E1 behind the infera-register sidecar, E2 serving NATS
                 itself, E3 over HTTP. Non-streaming and streaming answers through
                 each, the same prompt again lands on the same worker with cache hits
                 (kv-aware, KV events over ZMQ as ever) on NATS and HTTP workers alike;
                 a client that disconnects mid-stream: the engine behind the NATS
                 worker aborts the generation (its running gauge drops to 0) on both
                 worker kinds; the engine behind the sidecar killed mid-stream: the
                 client gets whole SSE events, then one in-band error event.
  --case faults  no responders (a worker whose record says nats and nobody serves its
                 subject): failover to a live NATS worker; alone: 502 in the OpenAI and
                 the Anthropic shapes; a router without --request-transport nats: 502
                 naming it; a worker played by the test: Infera's own frame shapes
                 (unary status in done, 4xx passed through), the envelope the router
                 publishes, SSE pieces cut mid-event then an error frame (whole events
                 only, then the in-band error), a stalled worker (idle timeout: in-band
                 error, three cancel messages carrying the inbox), a client gone
                 mid-stream (cancel), an error frame first (502); a NATS-serving engine
                 killed -9 mid-stream (no error frame can come: the idle timeout ends
                 the stream in-band).
"""
import base64
import http.client as httpclient
import json
import os
import queue
import re
import signal
import socket
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, check, free_port, http, parse_flags, poll,  # noqa: E402
                     start_engine, start_router, worker_flag)
from nats_peer import NatsPeer  # noqa: E402

ARGS = parse_flags("router", "engine", "register", "case")
BLOCKS = 8  # full 16-token blocks per prompt


def prompt(g):
    return [100000 * (g + 1) + i for i in range(1, 16 * BLOCKS + 1)]


def token(worker_id):
    return base64.urlsafe_b64encode(worker_id.encode()).decode().rstrip("=")


def start_nats(procs, store):
    port = free_port()
    proc = procs.start("nats", ["nats-server", "-js", "-sd", store, "-a", "127.0.0.1",
                                "-p", str(port)])
    proc.wait_line(r"Server is ready")
    return port, f"nats://127.0.0.1:{port}"


def metric_value(base, name, labels=""):
    """A sample of `name{labels}` (labels as rendered, e.g. 'outcome="ok"'), else 0."""
    status, body, _ = http("GET", base + "/metrics")
    sample = name + ("{" + labels + "}" if labels else "")
    m = re.search(r"^" + re.escape(sample) + r" (\S+)$", body, re.M)
    return float(m.group(1)) if status == 200 and m else 0.0


def running(engine_port):
    status, body, _ = http("GET", f"http://127.0.0.1:{engine_port}/metrics")
    m = re.search(r"^vllm:num_requests_running\S* (\S+)$", body, re.M)
    return float(m.group(1)) if status == 200 and m else None


def post(base, path, body, headers=None, timeout=30):
    """(status, parsed-or-text body, headers dict) of one POST."""
    port = int(base.rsplit(":", 1)[1])
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", path, json.dumps(body), h)
    r = conn.getresponse()
    raw = r.read().decode()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    try:
        return r.status, json.loads(raw), hdrs
    except ValueError:
        return r.status, raw, hdrs


class Stream:
    """A streaming request read as raw SSE: events() splits what arrived so far."""

    def __init__(self, base, path, body, timeout=60):
        port = int(base.rsplit(":", 1)[1])
        self.conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.worker = self.resp.getheader("X-Infera-Worker-Id")
        self.raw = b""

    def read_event(self):
        """Reads until one more complete event (blank line) arrived; returns its data."""
        while b"\n\n" not in self.raw:
            line = self.resp.readline()
            if not line:
                return None
            self.raw += line
        event, self.raw = self.raw.split(b"\n\n", 1)
        return event.decode()

    def read_rest(self):
        """Every event left until the end of the stream, as data strings."""
        events = []
        while True:
            e = self.read_event()
            if e is None:
                check(self.raw.strip() == b"", f"the stream ended on an event boundary "
                                                f"(left: {self.raw[:80]!r})")
                return events
            events.append(e)

    def abort(self):
        """Closes the client socket at once (RST: SO_LINGER 0). The response's file
        holds a reference to the socket: both are closed, or the descriptor stays open."""
        s = self.conn.sock
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.resp.close()
        self.conn.close()


def data_of(event):
    lines = [ln[5:].lstrip() for ln in event.split("\n") if ln.startswith("data:")]
    return "\n".join(lines)


def check_whole_events(events, what):
    """Every event is `data: <JSON>` or `data: [DONE]` (nothing cut in two)."""
    for e in events:
        d = data_of(e)
        if d == "[DONE]":
            continue
        try:
            json.loads(d)
        except ValueError:
            raise AssertionError(f"{what}: an event that is not whole JSON: {e[:200]!r}")


def wait_cached(base, worker_id, blocks):
    def cached():
        status, body, _ = http("GET", f"{base}/v1/admin/cache-view/{worker_id}")
        return status == 200 and json.loads(body)["block_count"] >= blocks
    poll(cached, f"the router's view of {worker_id} holds the prompt's blocks")


def pick_line(router, request_id):
    return router.wait_line(rf"pick .*request_id={re.escape(request_id)} .*").group(0)


def nats_worker_flag(fields):
    return worker_flag(fields) + ",request_transport=nats"


# --------------------------------------------------------------------------- serve
def case_serve(procs, nats_port, nats_url):
    _, e1 = start_engine(procs, ARGS.engine, "e1-sidecar-engine")
    e1_id = f"127.0.0.1:{e1['port']}"
    sidecar = procs.start("sidecar", [ARGS.register, "--request-transport", "nats", "--relay-only",
                                      "--nats-server", nats_url, "--url", f"http://{e1_id}",
                                      "--model-name", "mock-model"])
    sidecar.wait_line(r"NATS request consumer up")
    e2_proc, e2 = start_engine(procs, ARGS.engine, "e2-nats-engine", "--request-transport", "nats",
                               "--nats-server", nats_url)
    e2_proc.wait_line(r"NATS request consumer up")
    e2_id = f"127.0.0.1:{e2['port']}"
    _, e3 = start_engine(procs, ARGS.engine, "e3-http-engine")
    e3_id = f"127.0.0.1:{e3['port']}"
    router, base = start_router(
        procs, ARGS.router, [nats_worker_flag(e1), nats_worker_flag(e2), worker_flag(e3)],
        "--request-transport", "nats", "--nats-server", nats_url)
    transport = {e1_id: "nats", e2_id: "nats", e3_id: "http"}

    # Three long streams held open spread over the fleet (an active stream's blocks
    # make its worker dearer), each leaving its prompt cached there; then closed by
    # the client mid-stream: the engines behind the NATS workers abort their generation.
    prompt_of = {}  # worker -> a prompt it holds
    held = []
    for g in range(3):
        s = Stream(base, "/v1/completions", {"model": "mock-model", "prompt": prompt(g),
                                             "max_tokens": 3000, "stream": True})
        check(s.status == 200 and s.worker not in prompt_of and s.read_event() is not None,
              f"long stream {g} runs on {s.worker} ({transport.get(s.worker)}), a worker of its own")
        prompt_of[s.worker] = g
        held.append(s)
    ports = {e1_id: e1["port"], e2_id: e2["port"], e3_id: e3["port"]}
    for w, port in ports.items():
        poll(lambda: (running(port) or 0) >= 1, f"the engine behind {w} is generating")
    for s in held:
        s.abort()
    for w in (e1_id, e2_id):
        poll(lambda: running(ports[w]) == 0,
             f"client gone: the engine behind NATS worker {w} aborted its generation "
             f"(3000 tokens take minutes)", timeout=15)
    poll(lambda: metric_value(base, "infera_router_nats_requests_inflight") == 0,
         "no NATS request left in flight")
    cancelled = metric_value(base, "infera_router_nats_requests_total", 'outcome="cancelled"')
    cancels = metric_value(base, "infera_router_nats_cancels_sent_total")
    check(cancelled == 2 and cancels >= 2,
          f"both disconnects counted as cancelled, {cancels:.0f} cancel messages published")

    # The same prompts again, unary and streamed: the worker holding each answers with
    # cache hits, over NATS and over HTTP alike.
    hits_of = {}
    for worker, g in prompt_of.items():
        wait_cached(base, worker, BLOCKS - 1)
        rid = f"serve-{g}-again"
        status, body, h = post(base, "/v1/completions",
                               {"model": "mock-model", "prompt": prompt(g), "max_tokens": 3},
                               {"X-Infera-Request-Id": rid})
        hits = int(re.search(r"cache_hits=(\d+)", pick_line(router, rid)).group(1))
        check(status == 200 and h["x-infera-worker-id"] == worker and hits > 0
              and body["choices"][0]["text"] and body["usage"]["completion_tokens"] == 3,
              f"prompt {g} again, unary: answered by {worker} ({transport[worker]}), "
              f"cache_hits={hits}")
        stream = Stream(base, "/v1/completions",
                        {"model": "mock-model", "prompt": prompt(g), "max_tokens": 4,
                         "stream": True, "stream_options": {"include_usage": True}})
        events = stream.read_rest()
        check_whole_events(events, f"stream {g}")
        check(stream.status == 200 and stream.worker == worker and len(events) >= 3
              and data_of(events[-1]) == "[DONE]",
              f"prompt {g} again, streamed: {len(events)} whole events ending with [DONE] "
              f"from {worker}")
        hits_of[worker] = hits
    nats_ok = metric_value(base, "infera_router_nats_requests_total", 'outcome="ok"')
    check(nats_ok >= 4, f"infera_router_nats_requests_total{{outcome=\"ok\"}} = {nats_ok:.0f}")
    check(metric_value(base, "infera_router_nats_connected") == 1, "the NATS transport is connected")

    def long_stream(worker):
        s = Stream(base, "/v1/completions", {"model": "mock-model", "prompt": prompt(prompt_of[worker]),
                                             "max_tokens": 3000, "stream": True})
        check(s.status == 200 and s.worker == worker, f"a long stream runs on {worker} (its prompt)")
        return s

    # The engine behind the sidecar dies mid-stream: whole events, then an in-band error.
    s = long_stream(e1_id)
    first = [s.read_event(), s.read_event()]
    check(all(first), "two events arrived")
    e1_proc = [p for p in procs.procs if p.name == "e1-sidecar-engine"][0]
    e1_proc.p.send_signal(signal.SIGKILL)
    events = first + s.read_rest()
    check_whole_events(events[:-1], "the stream cut by the engine's death")
    err = json.loads(data_of(events[-1]))
    check("error" in err and "failed mid-stream" in err["error"]["message"]
          and e1_id not in err["error"]["message"],
          f"one in-band error event ends it: {err['error']['message'][:160]}")
    poll(lambda: metric_value(base, "infera_router_nats_requests_total", 'outcome="worker_error"') >= 1,
         "infera_router_nats_requests_total{outcome=\"worker_error\"} counts it")
    print(f"serve: repeats' cache hits {hits_of}", flush=True)


# --------------------------------------------------------------------------- faults
class FakeWorker:
    """A NATS worker the test plays: requests queue up, frames go out by hand."""

    def __init__(self, nats_port, worker_id):
        self.peer = NatsPeer(nats_port, name="fake-worker")
        self.worker_id = worker_id
        self.peer.sub("infera.req." + token(worker_id))
        self.peer.sub("infera.cancel." + token(worker_id))
        self.peer.flush()
        self.cancels = queue.Queue()
        self.requests = queue.Queue()
        threading.Thread(target=self._sort, daemon=True).start()

    def _sort(self):
        while True:
            m = self.peer.msgs.get()
            (self.cancels if m.subject.startswith("infera.cancel.") else self.requests).put(m)

    def request(self, timeout=10):
        m = self.requests.get(timeout=timeout)
        return m.reply, json.loads(m.data)

    def frame(self, inbox, kind, data=b"", status=None):
        headers = {"rs-type": kind}
        if status is not None:
            headers["rs-status"] = str(status)
        self.peer.pub(inbox, data, headers)


def in_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001 - re-raised by the caller
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()

    def join(timeout=30):
        t.join(timeout)
        if "error" in out:
            raise out["error"]
        check(not t.is_alive(), "the client finished")
        return out.get("value")
    return join


def case_faults(procs, nats_port, nats_url):
    e2_proc, e2 = start_engine(procs, ARGS.engine, "e2-nats-engine", "--request-transport", "nats",
                               "--nats-server", nats_url)
    e2_proc.wait_line(r"NATS request consumer up")
    ghost_port = free_port()  # nothing listens there, nobody serves its subject
    ghost = f"http://127.0.0.1:{ghost_port},model_name=mock-model,request_transport=nats"

    # No responders: failover to the live NATS worker.
    _, base = start_router(procs, ARGS.router, [ghost, nats_worker_flag(e2)],
                           "--request-transport", "nats", "--nats-server", nats_url,
                           name="router-noresp")
    for i in range(4):
        status, body, h = post(base, "/v1/completions",
                               {"model": "mock-model", "prompt": prompt(50 + i), "max_tokens": 2})
        check(status == 200 and h["x-infera-worker-id"] == f"127.0.0.1:{e2['port']}",
              f"request {i}: answered by the live NATS worker")
    nr = metric_value(base, "infera_router_nats_requests_total", 'outcome="no_responders"')
    fo = metric_value(base, "infera_router_failovers_total", f'worker_id="127.0.0.1:{e2["port"]}"')
    check(nr >= 1 and fo >= 1, f"no responders from the ghost, failed over ({nr:.0f} / {fo:.0f})")

    # Alone: 502 in the API's shape.
    _, base = start_router(procs, ARGS.router, [ghost], "--request-transport", "nats",
                           "--nats-server", nats_url, name="router-ghost")
    status, body, _ = post(base, "/v1/completions", {"model": "mock-model", "prompt": "x",
                                                      "max_tokens": 2})
    check(status == 502 and "no responders" in body["error"]["message"]
          and body["error"]["type"], f"OpenAI shape, 502: {body['error']['message'][:120]}")
    status, body, _ = post(base, "/v1/messages", {"model": "mock-model", "max_tokens": 2,
                                                   "messages": [{"role": "user", "content": "x"}]})
    check(status == 502 and body["type"] == "error" and "no responders" in body["error"]["message"],
          f"Anthropic shape, 502: {body['error']['message'][:120]}")

    # A worker that registered nats, a router without the transport.
    _, base = start_router(procs, ARGS.router, [nats_worker_flag(e2)], name="router-http-only")
    status, body, _ = post(base, "/v1/completions", {"model": "mock-model", "prompt": "x",
                                                      "max_tokens": 2})
    check(status == 502 and "--request-transport nats" in body["error"]["message"],
          "router without --request-transport nats: 502 naming it")

    # A worker the test plays (Infera's frame shapes, faults), idle timeout 2 s.
    fake_id = f"127.0.0.1:{free_port()}"
    fake = FakeWorker(nats_port, fake_id)
    _, base = start_router(procs, ARGS.router,
                           [f"http://{fake_id},model_name=mock-model,request_transport=nats"],
                           "--request-transport", "nats", "--nats-server", nats_url,
                           "--nats-req-idle-timeout", "2", name="router-fake")

    # Infera's unary reply: data without a status, the status in done.
    body = {"model": "mock-model", "prompt": "hello", "max_tokens": 2}
    join = in_thread(lambda: post(base, "/v1/completions", body, {"Authorization": "Bearer k"}))
    inbox, env = fake.request()
    check(env["path"] == "/v1/completions" and env["stream"] is False
          and env["body"]["prompt"] == "hello" and env["headers"]["Authorization"] == "Bearer k"
          and env["headers"]["X-Infera-Request-Id"] and "Content-Type" not in env["headers"],
          f"the envelope as Infera's workers read it: {json.dumps(env)[:200]}")
    answer = {"id": "cmpl-1", "object": "text_completion", "choices": [{"text": "hi"}]}
    fake.frame(inbox, "data", json.dumps(answer))
    fake.frame(inbox, "done", status=200)
    status, got, _ = join()
    check(status == 200 and got == answer, "unary: the data frame's body, the done frame's status")
    join = in_thread(lambda: post(base, "/v1/completions", body))
    inbox, _ = fake.request()
    fake.frame(inbox, "data", json.dumps({"error": {"message": "bad max_tokens"}}))
    fake.frame(inbox, "done", status=400)
    status, got, _ = join()
    check(status == 400 and got["error"]["message"] == "bad max_tokens", "a 4xx passes through")

    # SSE pieces cut mid-event, then an error frame: whole events, then the error.
    sbody = {"model": "mock-model", "prompt": "hello", "max_tokens": 5, "stream": True}
    join = in_thread(lambda: (lambda s: (s.status, s.read_rest()))(Stream(base, "/v1/completions", sbody)))
    inbox, env = fake.request()
    check(env["stream"] is True, "a stream's envelope says stream: true")
    for piece in ['data: {"n": 1}\n\nda', 'ta: {"n": 2}\n', '\ndata: {"n": 3, "cut": "he']:
        fake.frame(inbox, "data", piece)
    fake.frame(inbox, "error", "engine connection lost")
    status, events = join()
    check(status == 200 and [data_of(e) for e in events[:2]] == ['{"n": 1}', '{"n": 2}'],
          "the two whole events arrived, the cut third did not")
    err = json.loads(data_of(events[-1]))
    check(len(events) == 3 and "engine connection lost" in err["error"]["message"],
          f"then one in-band error event: {err['error']['message'][:120]}")

    # A stalled worker: the idle timeout ends the stream, the worker is told to cancel
    # three times, 1 s apart, with the request's inbox.
    t0 = time.time()
    join = in_thread(lambda: (lambda s: (s.status, s.read_rest()))(Stream(base, "/v1/completions", sbody)))
    inbox, _ = fake.request()
    fake.frame(inbox, "data", 'data: {"n": 1}\n\n')
    status, events = join()
    stalled = time.time() - t0
    err = json.loads(data_of(events[-1]))
    check(status == 200 and len(events) == 2 and "idle timeout" in err["error"]["message"]
          and 1.5 <= stalled < 10,
          f"stalled {stalled:.1f} s: in-band '{err['error']['message'][:100]}'")
    got = [fake.cancels.get(timeout=5).data.decode() for _ in range(3)]
    check(got == [inbox] * 3, "three cancel messages carry the request's inbox")
    check(metric_value(base, "infera_router_nats_requests_total", 'outcome="idle_timeout"') == 1,
          "counted as idle_timeout")

    # A client gone mid-stream: the worker hears a cancel with the inbox.
    s = in_thread(lambda: Stream(base, "/v1/completions", sbody))
    inbox, _ = fake.request()
    fake.frame(inbox, "data", 'data: {"n": 1}\n\n')
    stream = s()
    check(stream.read_event() is not None, "the first event reached the client")
    stream.abort()
    deadline = time.time() + 10
    heard = None
    while heard is None and time.time() < deadline:
        fake.frame(inbox, "data", 'data: {"n": 2}\n\n')  # the relay's write fails: cancel
        try:
            heard = fake.cancels.get(timeout=0.1).data.decode()
        except queue.Empty:
            pass
    check(heard == inbox, "client gone: the worker was told to cancel this request")

    # A client that stops reading while the worker keeps sending (NATS has no
    # back-pressure): the router holds at most 8 MiB of the answer, drops the rest and
    # fails the request; the client leaves: the worker hears a cancel.
    port = int(base.rsplit(":", 1)[1])
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", port))
    payload = json.dumps(sbody).encode()
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    inbox, _ = fake.request()
    late = metric_value(base, "infera_router_nats_late_frames_total")
    event = b'data: {"pad": "' + b"x" * 100_000 + b'"}\n\n'
    for _ in range(320):  # 32 MB: past every socket buffer and the 8 MiB bound
        fake.frame(inbox, "data", event)
    fake.peer.flush()
    poll(lambda: metric_value(base, "infera_router_nats_late_frames_total") > late,
         "past the bound the router dropped the worker's frames instead of holding them")
    held_bytes = metric_value(base, "infera_router_nats_buffered_bytes")
    check(held_bytes <= 8 << 20, f"reply bytes held for readers: {held_bytes:.0f} (<= 8 MiB)")
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    slow.close()
    deadline, heard = time.time() + 10, False
    while not heard and time.time() < deadline:  # (the last request's resends may come first)
        try:
            heard = fake.cancels.get(timeout=0.5).data.decode() == inbox
        except queue.Empty:
            pass
    check(heard, "the slow client gone: the worker was told to cancel")

    # An error frame before any data: 502 (nothing reached the client, no one else).
    join = in_thread(lambda: post(base, "/v1/completions", body))
    inbox, _ = fake.request()
    fake.frame(inbox, "error", "All connection attempts failed")
    status, got, _ = join()
    check(status == 502 and "All connection attempts failed" in got["error"]["message"],
          "an error frame first: 502 with the worker's text")
    fake.peer.close()

    # A NATS-serving engine killed -9 mid-stream: no error frame can come; the idle
    # timeout (2 s here) ends the stream with an in-band error after whole events.
    _, base = start_router(procs, ARGS.router, [nats_worker_flag(e2)], "--request-transport",
                           "nats", "--nats-server", nats_url, "--nats-req-idle-timeout", "2",
                           name="router-native")
    s = Stream(base, "/v1/completions", {"model": "mock-model", "prompt": prompt(70),
                                         "max_tokens": 3000, "stream": True})
    first = [s.read_event(), s.read_event()]
    e2_proc.p.send_signal(signal.SIGKILL)
    events = first + s.read_rest()
    check_whole_events(events[:-1], "the stream of the killed engine")
    err = json.loads(data_of(events[-1]))
    check("idle timeout" in err["error"]["message"],
          f"engine killed: the idle timeout ends the stream in-band ({len(events)} events)")


def main():
    with Processes() as procs, tempfile.TemporaryDirectory() as store:
        try:
            nats_port, nats_url = start_nats(procs, store)
            {"serve": case_serve, "faults": case_faults}[ARGS.case](procs, nats_port, nats_url)
        except BaseException:
            procs.dump_tails()
            raise
    print("nats request transport: ok", flush=True)


if __name__ == "__main__":
    main()
