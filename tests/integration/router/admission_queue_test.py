#!/usr/bin/python3
"""The router's admission queue (--admission-queue on, doc/admission.md "Router wiring",
item 9) on a real infera-router with real infera-mock-engines.

The engines' prefill step is slowed to a fixed time (--prefill-a0 MS), so while a
request prefills its engine has pending prefill blocks; --queue-threshold-blocks 1 then
holds every request that arrives while each engine prefills. With the timed prefill (the
default) a 4-block prefill is overdue after ~1 ms at the seed rate, and counts its floor
until its first token: 0.3 x 4 = 1.2 blocks, still >= 1. Bounded polls only.

Cases (--case):
  burst   two engines, eight requests at once: some are held, every one is answered
          200, the depth gauge and the in-flight gauge return to 0, no load is left
          on the workers, each released request's wait is observed.
  bound   one engine, --queue-max 1, --queue-max-wait-s 1: one held, the next two get
          429 queue_full with Retry-After in OpenAI's and Anthropic's shapes; the held
          one gets 429 queue_timeout after its second of waiting.
  cancel  one engine: a held request whose client disconnects leaves the queue
          (cancelled_total 1, depth 0), the in-flight gauge counts only the request
          that is served, and nothing is left on the worker after it.
  order   one engine: a bad X-Infera-Priority is 400 in both shapes; five held
          requests (tenants a, a, a, b via X-Infera-Tenant, then priority 5) bind in
          the order priority first, then tenants in turn: p, a1, b1, a2, a3.
  join    the router's default queue (auto: on for kv-aware; no --admission-queue
          flag) with --queue-join-blocks 1, one engine, the share gate at its default:
          32 requests of distinct prompts fill its window first (it holds nothing
          before; doc/admission.md "Hold rule"), then
          while prompt P computes, another prompt binds at once but P's duplicate
          waits; once the view holds P, a third request of P passes the queue while a
          duplicate of a new prompt R waits behind R's first copy; all answered 200.
Usage: admission_queue_test.py --router BIN --engine BIN --case NAME
"""
import json
import os
import re
import socket
import sys
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, check, http, metric, parse_flags, poll,  # noqa: E402
                     start_engine, start_router, worker_flag)

ARGS = parse_flags("router", "engine", case=None)
QUEUE = ["--admission-queue", "on", "--queue-threshold-blocks", "1"]


def engines(procs, n, prefill_ms):
    out = []
    for i in range(n):
        _, f = start_engine(procs, ARGS.engine, f"engine{i}", "--prefill-a0", str(prefill_ms))
        out.append(worker_flag(f))
    return out


def body(g):
    """A completion of a 4-block prompt of its own (no shared prefix)."""
    return {"model": "mock-model", "prompt": [1000 * (g + 1) + i for i in range(64)],
            "max_tokens": 2}


def sample(base, name, labels=""):
    """A sample of base's /metrics (labels as rendered, e.g. 'reason="full"'); None if absent."""
    _, text, _ = http("GET", base + "/metrics")
    series = name + ("{" + labels + "}" if labels else "")
    m = re.search(r"^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def depth(base):
    _, text, _ = http("GET", base + "/metrics")
    return sum(float(v) for v in re.findall(r"^infera_router_queue_depth\{[^}]*\} (\S+)$", text,
                                            re.M))


def queued(base):
    return sample(base, "infera_router_queue_admitted_total", 'outcome="queued"') or 0


def send(base, g, results, path="/v1/completions", headers=None, payload=None):
    """Sends one request in a thread; its (status, body, headers) lands in results[g]."""
    def run():
        results[g] = http("POST", base + path, payload or body(g), timeout=60,
                          headers={"X-Infera-Request-Id": f"q-{g}", **(headers or {})})
    t = threading.Thread(target=run)
    t.start()
    return t


def idle(base):
    """Nothing in flight and no load left on any target."""
    if metric(base, 'infera_request_inflight{router="kv-aware"}') != 0 or depth(base) != 0:
        return False
    _, text, _ = http("GET", base + "/v1/workers")
    return all(t["active_blocks"] == 0 for w in json.loads(text)["workers"] for t in w["targets"])


def burst():
    with Processes() as procs:
        _, base = start_router(procs, ARGS.router, engines(procs, 2, 500), *QUEUE)
        results = {}
        threads = [send(base, g, results) for g in range(8)]
        for t in threads:
            t.join()
        for g in range(8):
            check(results[g][0] == 200, f"request {g} answered 200 ({results[g][0]})")
        held = queued(base)
        bound = sample(base, "infera_router_queue_admitted_total", 'outcome="bind_now"')
        check(held >= 1 and held + bound == 8, f"{held:g} of 8 held, {bound:g} bound at once")
        check(sample(base, "infera_router_queue_wait_seconds_count") == held,
              "each released request's wait is observed")
        poll(lambda: idle(base), "depth 0, nothing in flight, no load left on the workers")
        check(sample(base, "infera_router_queue_rejected_total", 'reason="full"') == 0,
              "none rejected")


def check_429(result, api, code):
    status, text, headers = result
    check(status == 429, f"{api}: 429 ({status} {text})")
    check(int(headers.get("Retry-After", "0")) >= 1, f"{api}: Retry-After {headers}")
    err = json.loads(text)
    if api == "openai":
        e = err["error"]
        check(set(err) == {"error"} and e["type"] == "rate_limit_error" and e["code"] == code
              and e["param"] is None and e["message"], f"openai: error shape {text}")
    else:
        check(err["type"] == "error" and err["error"]["type"] == "rate_limit_error" and
              err["error"]["message"], f"anthropic: error shape {text}")


def bound():
    with Processes() as procs:
        _, base = start_router(procs, ARGS.router, engines(procs, 1, 4000), *QUEUE,
                               "--queue-max", "1", "--queue-max-wait-s", "1")
        results = {}
        hold = send(base, 0, results)
        poll(lambda: sample(base, "infera_router_queue_admitted_total", 'outcome="bind_now"') == 1,
             "the first request is bound")
        waiter = send(base, 1, results)
        poll(lambda: depth(base) == 1, "the second request waits")
        check_429(http("POST", base + "/v1/completions", body(2)), "openai", "queue_full")
        anthropic = {"model": "mock-model", "max_tokens": 2,
                     "messages": [{"role": "user", "content": "hello"}]}
        check_429(http("POST", base + "/v1/messages", anthropic,
                       headers={"anthropic-version": "2023-06-01"}), "anthropic", None)
        check(sample(base, "infera_router_queue_rejected_total", 'reason="full"') == 2,
              "two rejected: full")
        waiter.join()
        check_429(results[1], "openai", "queue_timeout")
        check(sample(base, "infera_router_queue_rejected_total", 'reason="timeout"') == 1,
              "one rejected: timeout")
        hold.join()
        check(results[0][0] == 200, "the bound request answered 200")
        poll(lambda: idle(base), "depth 0, nothing in flight")


def cancel():
    with Processes() as procs:
        _, base = start_router(procs, ARGS.router, engines(procs, 1, 3000), *QUEUE)
        results = {}
        hold = send(base, 0, results)
        poll(lambda: sample(base, "infera_router_queue_admitted_total", 'outcome="bind_now"') == 1,
             "the first request is bound")
        port = int(base.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        data = json.dumps(body(1)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        poll(lambda: depth(base) == 1, "the second request waits")
        check(metric(base, 'infera_request_inflight{router="kv-aware"}') == 2, "two in flight")
        s.close()
        poll(lambda: sample(base, "infera_router_queue_cancelled_total") == 1,
             "the disconnected waiter is cancelled")
        check(depth(base) == 0, "depth back to 0")
        check(metric(base, 'infera_request_inflight{router="kv-aware"}') == 1,
              "only the bound request is in flight")
        hold.join()
        check(results[0][0] == 200, "the bound request answered 200")
        poll(lambda: idle(base), "nothing in flight, no load left on the worker")
        check(sample(base, "infera_router_queue_wait_seconds_count") == 0, "nothing released")


def order():
    with Processes() as procs:
        router, base = start_router(procs, ARGS.router, engines(procs, 1, 1500), *QUEUE)
        for path, payload in (("/v1/completions", body(9)),
                              ("/v1/messages", {"model": "mock-model", "max_tokens": 2,
                                                "messages": [{"role": "user", "content": "x"}]})):
            status, text, _ = http("POST", base + path, payload,
                                   headers={"X-Infera-Priority": "high"})
            err = json.loads(text)
            shape = ("type" in err["error"] and (err.get("type") == "error") == (path ==
                     "/v1/messages"))
            check(status == 400 and shape, f"{path}: bad X-Infera-Priority is 400 ({text})")
        results = {}
        threads = [send(base, "hold", results, payload=body(0))]
        poll(lambda: sample(base, "infera_router_queue_admitted_total", 'outcome="bind_now"') == 1,
             "the first request is bound")
        waits = [("a1", {"X-Infera-Tenant": "a"}), ("a2", {"X-Infera-Tenant": "a"}),
                 ("a3", {"X-Infera-Tenant": "a"}), ("b1", {"X-Infera-Tenant": "b"}),
                 ("p", {"X-Infera-Tenant": "c", "X-Infera-Priority": "5"})]
        for n, (g, headers) in enumerate(waits, 1):
            threads.append(send(base, g, results, headers=headers, payload=body(n)))
            poll(lambda: queued(base) == n, f"{g} waits")
        check(depth(base) == 5, "five wait while the first prefills")
        for t in threads:
            t.join()
        check(all(r[0] == 200 for r in results.values()), "every request answered 200")
        picks = [m.group(1) for line in router.grep(r"pick policy=")
                 for m in [re.search(r"request_id=q-(\S+)", line)] if m]
        check(picks == ["hold", "p", "a1", "b1", "a2", "a3"], f"bind order {picks}")
        poll(lambda: idle(base), "depth 0, nothing in flight")


def cached_blocks(base):
    _, text, _ = http("GET", base + "/v1/admin/fleet")
    return sum(t["cached_blocks"] for t in json.loads(text)["targets"])


def join():
    with Processes() as procs:
        _, base = start_router(procs, ARGS.router, engines(procs, 1, 600),
                               "--queue-join-blocks", "1")
        admitted = lambda: sample(base, "infera_router_queue_admitted_total",  # noqa: E731
                                  'outcome="bind_now"') or 0
        # The share gate holds nothing until its window (32 picks) is full: 32 prompts of
        # their own, at once (none joinable, so none waits).
        results = {}
        warm = [send(base, f"w{i}", results, payload=body(100 + i)) for i in range(32)]
        for t in warm:
            t.join()
        check(all(results[f"w{i}"][0] == 200 for i in range(32)), "the 32 warm-up prompts: 200")
        check(admitted() == 32 and queued(base) == 0, "warm-up: every one bound at once")
        poll(lambda: idle(base), "warm-up done")
        poll(lambda: cached_blocks(base) >= 32 * 4, "the view holds the warm-up prompts")
        warm_blocks = cached_blocks(base)
        bind_now = lambda: admitted() - 32  # noqa: E731
        threads = [send(base, "p1", results, payload=body(0))]
        poll(lambda: bind_now() == 1, "P's first copy is bound")
        threads.append(send(base, "q", results, payload=body(1)))
        poll(lambda: bind_now() == 2, "another prompt binds at once (nothing in flight to join)")
        threads.append(send(base, "p2", results, payload=body(0)))
        poll(lambda: depth(base) == 1, "P's duplicate waits for its copy in flight")
        check(queued(base) == 1, "one held")
        for t in threads:
            t.join()
        check(all(results[g][0] == 200 for g in ("p1", "q", "p2")), "P, Q and P again: 200")
        poll(lambda: idle(base), "depth 0, nothing in flight")
        poll(lambda: cached_blocks(base) >= warm_blocks + 8, "the view holds P and Q")
        threads = [send(base, "r1", results, payload=body(2))]
        poll(lambda: bind_now() == 3, "R's first copy is bound")
        threads.append(send(base, "r2", results, payload=body(2)))
        poll(lambda: depth(base) == 1, "R's duplicate waits")
        threads.append(send(base, "p3", results, payload=body(0)))
        poll(lambda: bind_now() == 4, "P, cached, passes the queue")
        check(queued(base) == 2, "held so far: P's and R's duplicates")
        for t in threads:
            t.join()
        check(all(results[g][0] == 200 for g in ("r1", "r2", "p3")), "R, R again and P: 200")
        check(sample(base, "infera_router_queue_wait_seconds_count") == 2,
              "both released waits observed")
        poll(lambda: idle(base), "depth 0, nothing in flight, no load left on the worker")


if __name__ == "__main__":
    {"burst": burst, "bound": bound, "cancel": cancel, "order": order, "join": join}[ARGS.case]()
    print(f"admission_queue_test {ARGS.case}: PASS")
