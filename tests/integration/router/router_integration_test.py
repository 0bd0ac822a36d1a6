#!/usr/bin/python3
"""Integration test of infera-router with real processes.

Starts fake workers (tests/integration/router/fake_worker.cc, real HTTP servers,
one publishing KV events over ZMQ) and infera-router on free ports, then checks:
the official openai and @anthropic-ai/sdk npm clients (streaming and not), request
ids, bad input (malformed JSON, wrong types, huge body, huge headers, slow and
abruptly disconnecting clients), upstream failure (502), a dead worker out of picks
after its health checks (/health counts routable workers), the KV-aware
end to end (the prefix holder gets both requests; cache-view; pick log hits),
`promtool check metrics`, no leaked load, and graceful shutdown on SIGTERM.
Exits non-zero on the first failure. Waits are bounded polls, never fixed sleeps.
"""
import http.client, json, os, re, signal, socket, subprocess, sys, threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import check, free_port, poll, raw  # noqa: E402

ARGS = None
PROCS = harness.Processes()


def Proc(argv, name):
    """Starts argv under PROCS (output in a log file; see harness.Processes)."""
    return PROCS.start(name, argv)


def request(port, method, path, body=None, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, dict(r.getheaders()), out


def get_json(port, path):
    s, _, b = request(port, "GET", path)
    check(s == 200, f"GET {path} -> {s} {b[:200]}")
    return json.loads(b)


def metrics(port):
    s, _, b = request(port, "GET", "/metrics")
    check(s == 200, "metrics status")
    return b.decode()


def metric_value(text, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def start_worker(name, *extra):
    return harness.start_fake_worker(PROCS, ARGS.fake_worker, name, *extra)


def main():
    global ARGS
    ARGS = harness.parse_flags("router", "fake-worker", "node-modules", "scripts")

    wa, pa, kva = start_worker("A", "--kv-events-port", "0")
    wb, pb, kvb = start_worker("B", "--kv-events-port", "0")
    ws, ps, _ = start_worker("S", "--chunks", "200", "--chunk-delay-ms", "20")
    wf, pf, _ = start_worker("F", "--fail-status", "500")
    wo, po, _ = start_worker("O")
    dead_port = free_port()  # nothing listens there: connect is refused

    workers = [
        f"http://127.0.0.1:{pa},model_name=fake-model,kv_events_endpoint={kva}",
        f"http://127.0.0.1:{pb},model_name=fake-model,kv_events_endpoint={kvb}",
        f"http://127.0.0.1:{ps},model_name=slow-model",
        f"http://127.0.0.1:{pf},model_name=fail-model",
        f"http://127.0.0.1:{dead_port},model_name=fo-model",
        f"http://127.0.0.1:{po},model_name=fo-model",
    ]
    argv = [ARGS.router, "--host", "127.0.0.1", "--port", "0", "--threads", "2",
            "--router-policy", "kv-aware",
            "--max-body-bytes", str(1 << 20), "--breaker-failures", "100"]
    for w in workers:
        argv += ["--worker", w]
    router = Proc(argv, "router")
    rp = int(router.wait_line(r"listening on [\d.]+:(\d+)").group(1))
    poll(lambda: get_json(rp, "/health")["active_workers"] == 6, "6 workers")
    print("router on", rp, flush=True)

    # --- official clients ---
    env = dict(os.environ, ROUTER_URL=f"http://127.0.0.1:{rp}", NODE_MODULES=ARGS.node_modules)
    for script in ("openai_client.mjs", "anthropic_client.mjs"):
        r = subprocess.run(["node", os.path.join(ARGS.scripts, script)], env=env,
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"{script}: {r.stdout}\n{r.stderr}")
        print(r.stdout.strip(), flush=True)

    # --- request id and worker header ---
    s, h, b = request(rp, "POST", "/v1/chat/completions",
                      {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
                      {"X-Infera-Request-Id": "req-echo-1"})
    check(s == 200 and h.get("X-Infera-Request-Id") == "req-echo-1", f"request id echo {h}")
    s, h, b = request(rp, "GET", "/health")
    check(re.fullmatch(r"[0-9a-f]{24}", h.get("X-Infera-Request-Id", "")), "generated id")
    check(set(json.loads(b)) == {"status", "active_workers"}, "health shape")
    # active_workers counts routable workers: the dead one leaves after its health checks.
    poll(lambda: get_json(rp, "/health") == {"status": "ok", "active_workers": 5},
         "/health: 5 routable workers once the dead one failed its health checks")

    # --- bad input ---
    chat = "/v1/chat/completions"
    s, _, b = request(rp, "POST", chat, b"{not json")
    check(s == 400 and "not valid JSON" in json.loads(b)["error"]["message"], f"bad json {b}")
    s, _, b = request(rp, "POST", chat, {"model": 5, "messages": []})
    check(s == 400 and "'model' must be a string" in json.loads(b)["error"]["message"], "types")
    s, _, b = request(rp, "POST", "/v1/messages", {"model": "fake-model", "messages": 3, "max_tokens": 1})
    e = json.loads(b)
    check(s == 400 and e["type"] == "error" and e["error"]["type"] == "invalid_request_error",
          f"anthropic error shape {b}")
    big = b'{"model":"fake-model","messages":[{"role":"user","content":"' + b"x" * (2 << 20) + b'"}]}'
    out = raw(rp, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(big)).encode() + b"\r\n\r\n" + big[:1000])
    check(out.startswith(b"HTTP/1.1 413") and b"exceeds the limit" in out, f"413: {out[:200]}")
    out = raw(rp, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 431"), f"431: {out[:100]}")
    out = raw(rp, b"GARBAGE\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 400"), f"400 on garbage: {out[:100]}")
    s, _, b = request(rp, "GET", "/nope")
    check(s == 404 and "error" in json.loads(b), "404 shape")
    # A client that sends half a body and vanishes, and one that disconnects at once.
    raw(rp, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mo", read=False)
    raw(rp, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", read=False)

    # --- upstream failures ---
    s, _, b = request(rp, "POST", chat, {"model": "fail-model", "messages": [{"role": "user", "content": "x"}]})
    check(s == 502 and "answered 500" in json.loads(b)["error"]["message"], f"502: {s} {b}")
    for i in range(4):  # one of the two fo-model workers is dead: its health checks hide it
        s, _, b = request(rp, "POST", chat, {"model": "fo-model", "messages": [{"role": "user", "content": str(i)}]})
        check(s == 200, f"request {i} with a dead worker: {s} {b}")
    check(re.search(r'infera_router_worker_healthy\{worker_id="127.0.0.1:%d"\} 0' % dead_port,
                    metrics(rp)), "the dead worker is out of picks")

    # --- abrupt client disconnect mid-stream cancels the upstream request ---
    sock = socket.create_connection(("127.0.0.1", rp))
    body = json.dumps({"model": "slow-model", "stream": True, "messages": [{"role": "user", "content": "x"}]}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while b"tok0" not in got:
        got += sock.recv(4096)
    check(b"text/event-stream" in got and b"chunked" in got.lower(), "stream headers")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()  # RST
    poll(lambda: get_json(ps, "/stats")["cancelled"] == 1, "upstream cancelled after client disconnect")

    # --- KV-aware end to end: worker B holds the prefix (seeded directly) ---
    prefix = list(range(1000, 1000 + 160))  # 10 blocks of 16
    s, _, _ = request(pb, "POST", "/v1/completions", {"model": "fake-model", "prompt": prefix})
    check(s == 200, "seed B")
    poll(lambda: get_json(rp, f"/v1/admin/cache-view/127.0.0.1:{pb}")["block_count"] == 10,
         "cache-view of B = 10 blocks")
    view = get_json(rp, f"/v1/admin/cache-view/127.0.0.1:{pb}?dp_rank=0")
    check(view == {"worker_id": f"127.0.0.1:{pb}", "dp_rank": 0, "target": f"127.0.0.1:{pb}",
                   "block_count": 10}, f"view {view}")
    for i, tail in enumerate(([1, 2, 3] * 8, [7] * 40)):
        rid = f"kv-{i}"
        s, h, b = request(rp, "POST", "/v1/completions", {"model": "fake-model", "prompt": prefix + tail},
                          {"X-Infera-Request-Id": rid})
        check(s == 200 and json.loads(b)["worker"] == "B", f"kv request {i} went to {b[:200]}")
        line = router.wait_line(r"pick policy=kv-aware role=mixed request_id=%s .*" % rid).group(0)
        check(f"picked=127.0.0.1:{pb}" in line and "cache_hits=10" in line, f"pick log: {line}")
    s, _, b = request(rp, "GET", "/v1/admin/cache-view/nope:1")
    check(s == 404, "unknown cache-view 404")

    # --- metrics: promtool, no leaked load ---
    text = poll(lambda: (lambda t: t if metric_value(t, "infera_router_pending_pick_guards") == 0 else None)(metrics(rp)),
                "pending guards back to 0")
    for m in re.finditer(r"^infera_policy_active_blocks\{[^}]*\} (\S+)$", text, re.M):
        check(float(m.group(1)) == 0, "active blocks leaked: " + m.group(0))
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    check(r.returncode == 0, "promtool: " + r.stdout + r.stderr)
    for name in ("infera_router_picks_total", "infera_request_duration_seconds_bucket",
                 "infera_router_routing_overhead_seconds_bucket", "infera_kv_events_messages_total",
                 "infera_router_worker_breaker_state"):
        check(name in text, "metric missing: " + name)

    # --- graceful shutdown: an in-flight stream finishes, then the router exits 0 ---
    result = {}

    def slow_stream():
        result["status"], _, result["body"] = request(
            rp, "POST", chat, {"model": "slow-model", "stream": True,
                               "messages": [{"role": "user", "content": "x"}]}, timeout=60)

    t = threading.Thread(target=slow_stream)
    t.start()
    poll(lambda: get_json(ps, "/stats")["requests"] == 2, "second slow stream started")
    router.p.send_signal(signal.SIGTERM)
    t.join(60)
    check(result.get("status") == 200 and b"[DONE]" in result.get("body", b""), "stream drained on SIGTERM")
    check(router.p.wait(30) == 0, "router exit code")
    print("router integration OK", flush=True)


if __name__ == "__main__":
    with PROCS:
        main()
