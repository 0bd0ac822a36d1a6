#!/usr/bin/python3
"""Integration tests of infera-mock-engine (and, when built, infera-router with it).

Starts real processes on OS-picked ports, talks HTTP and ZMQ to them, polls with
bounded waits. Usage: mock_engine_test.py BUILD_DIR [router]
"""
import json
import os
import sys
import time
import urllib.request

import msgpack
import zmq

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, http, poll, start_engine as harness_start_engine  # noqa: E402
from harness import start_router, worker_flag  # noqa: E402

BUILD = sys.argv[1]
ENGINE = os.path.join(BUILD, "apps/infera-mock-engine/infera-mock-engine")
ROUTER = os.path.join(BUILD, "apps/infera-router/infera-router")
PROCS = Processes()


def start_engine(*extra):
    p, fields = harness_start_engine(PROCS, ENGINE, f"engine{len(PROCS.procs)}",
                                     "--num-gpu-blocks", "256", "--speedup", "50", *extra)
    return p.p, fields


def test_engine():
    _, f = start_engine()
    base = f"http://127.0.0.1:{f['port']}"
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.connect(f["events"])
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    time.sleep(0.3)  # let the SUB connect before events flow (slow joiner)

    status, body, _ = http("GET", base + "/health")
    check(status == 200, "/health answers 200")
    status, body, _ = http("GET", base + "/v1/models")
    check(json.loads(body)["data"][0]["id"] == "mock-model", "/v1/models lists the model")
    status, body, _ = http("POST", base + "/tokenize", {"prompt": "hi"})
    check(json.loads(body)["count"] == 2, "/tokenize counts tokens")
    status, body, _ = http("POST", base + "/tokenize", {"messages": "x"})
    check(status == 400, "/tokenize rejects bad messages with 400")
    status, body, _ = http("POST", base + "/v1/completions", {"prompt": [1, -2]})
    check(status == 400 and "error" in json.loads(body), "bad token ids get a JSON 400")
    status, body, _ = http("POST", base + "/v1/completions", "{not json")
    check(status == 400, "non-object body gets 400")

    prompt = list(range(1, 101))  # 6 full blocks
    status, body, _ = http("POST", base + "/v1/completions", {"prompt": prompt, "max_tokens": 4})
    first = json.loads(body)
    check(status == 200 and first["usage"]["completion_tokens"] == 4, "completion of 4 tokens")
    check(first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "cold cache: 0 cached")
    status, body, _ = http("POST", base + "/v1/completions", {"prompt": prompt, "max_tokens": 4})
    check(json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 96,
          "repeat: 96 cached tokens (6 blocks)")

    # Streaming chat with usage.
    req = urllib.request.Request(base + "/v1/chat/completions", method="POST",
                                 data=json.dumps({"messages": [{"role": "user", "content": "hello"}],
                                                  "max_tokens": 3, "stream": True,
                                                  "stream_options": {"include_usage": True}}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    events = [l[6:] for l in text.split("\n") if l.startswith("data: ")]
    check(events[-1] == "[DONE]", "stream ends with [DONE]")
    usage = [json.loads(e) for e in events[:-1] if "usage" in json.loads(e)]
    check(usage and usage[0]["usage"]["completion_tokens"] == 3, "stream carries usage")

    # KV events: BlockStored with 16 token ids per block arrive on the PUB socket.
    stored = 0
    deadline = time.time() + 10
    while time.time() < deadline and stored == 0:
        if sub.poll(200):
            topic, seq, payload = sub.recv_multipart()
            batch = msgpack.unpackb(payload, raw=False)
            for ev in batch["events"]:
                if ev["type"] == "BlockStored":
                    check(len(ev["token_ids"]) == 16 * len(ev["block_hashes"]),
                          "BlockStored carries block_size tokens per hash")
                    stored += 1
    check(stored > 0, "BlockStored events published")

    status, body, _ = http("GET", base + "/debug/kv-blocks")
    dump = json.loads(body)
    check(dump["ranks"][0]["block_count"] >= 6, "debug dump lists cached blocks")
    status, body, _ = http("GET", base + "/metrics")
    check("vllm:prefix_cache_hits_total" in body, "/metrics has vllm series")
    status, _, _ = http("POST", base + "/reset_prefix_cache")
    check(status == 200, "reset_prefix_cache")
    status, body, _ = http("GET", base + "/debug/kv-blocks")
    check(json.loads(body)["ranks"][0]["block_count"] == 0, "reset empties the cache")


def test_faults():
    _, f = start_engine("--fail-fraction", "1")
    base = f"http://127.0.0.1:{f['port']}"
    status, body, _ = http("POST", base + "/v1/completions", {"prompt": [1, 2, 3]})
    check(status == 500 and "error" in json.loads(body), "--fail-fraction 1 fails requests")
    p, f = start_engine("--die-after", "1")
    base = f"http://127.0.0.1:{f['port']}"
    http("POST", base + "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 1})
    p.wait(timeout=10)
    check(p.returncode == 3, "--die-after 1 exits with 3")


def test_router_view(drop):
    extra = ["--drop-event-fraction", "0.3"] if drop else []
    _, f = start_engine(*extra)
    wid = f"127.0.0.1:{f['port']}"
    _, rbase = start_router(PROCS, ROUTER, [worker_flag(f)], "--router-policy", "kv-aware")
    for g in range(12):
        prompt = [1000 * g + i for i in range(1, 300)]
        status, _, _ = http("POST", rbase + "/v1/completions",
                            {"model": "mock-model", "prompt": prompt, "max_tokens": 2})
        check(status == 200, f"request {g} through the router")

    def same():
        _, b, _ = http("GET", f"http://{wid}/debug/kv-blocks")
        engine = json.loads(b)["ranks"][0]["block_count"]
        _, b, _ = http("GET", f"{rbase}/v1/admin/cache-view/{wid}")
        return json.loads(b).get("block_count") == engine
    poll(same, "router cache view equals the engine's dump" + (" with drops" if drop else ""))


def main():
    with PROCS:
        test_engine()
        test_faults()
        if len(sys.argv) > 2 and sys.argv[2] == "router" and os.path.exists(ROUTER):
            test_router_view(drop=False)
            test_router_view(drop=True)
    print("all passed")


if __name__ == "__main__":
    main()
