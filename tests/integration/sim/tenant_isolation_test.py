#!/usr/bin/python3
"""Tenant isolation (cache_salt) and LoRA-aware hashing through the real infera-router
and real mock engines, which hash cache_salt and LoRA adapters into their prefix cache
as vLLM does (issue 22 item 13, issue 26). Usage: tenant_isolation_test.py BUILD_DIR

The threat: tenant B guesses tenant A's prompt prefix P. Without isolation the engine
serves the guess from A's cache (`cached_tokens` confirms it), and KV-aware routing
sends the guess to A's worker to make sure it does.

1. --tenant-cache-salt header:Authorization: A's repeat hits its own cache (predicted
   and reported); B's guess gets no cached tokens and no predicted hit (pick log
   cache_hits=0), even with A's salt as its own cache_salt; B's repeat of its own
   prompt hits; the engines received one 43-character salt per tenant; a repeated
   Authorization header is refused (400).
2. Default flags (the option off): B's unsalted guess is predicted on A's worker and
   served from A's cache (the side channel the option closes). A client's own
   cache_salt is honoured: routed by (salt, tokens), it isolates as in vLLM.
3. A salt-blind wire (engines without extra_keys, as older vLLM): with the option on
   the router cannot attribute a chain's first block to a salt, so it predicts no hit
   (the safe side) while the engines still serve tenants' repeats from cache.
4. LoRA: a base-model prompt and the same prompt for adapter sql-lora never share a
   predicted hit or a cached block; repeats of each hit on their own worker.
Waits are bounded polls; no fixed sleeps.
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, check, http, poll, raw, start_engine, start_router,  # noqa: E402
                     worker_flag)

BUILD = sys.argv[1]
ENGINE = os.path.join(BUILD, "apps/infera-mock-engine/infera-mock-engine")
ROUTER = os.path.join(BUILD, "apps/infera-router/infera-router")
BLOCK = 16
PREFIX = list(range(5000, 5000 + 8 * BLOCK))  # A's secret prefix: 8 blocks
FULL_HIT = 8 * BLOCK  # what a repeat of PREFIX + a short tail serves from cache


class Fleet:
    """Two mock engines behind one router; requests carry X-Infera-Request-Id so the
    pick log line of each is found by id."""

    def __init__(self, procs, engine_flags=(), router_flags=(), worker_extra=""):
        self.engines = [start_engine(procs, ENGINE, f"engine{i}", "--num-gpu-blocks", "1024",
                                     "--speedup", "50", *engine_flags)[1] for i in range(2)]
        self.wids = [f"127.0.0.1:{f['port']}" for f in self.engines]
        self.router, self.base = start_router(
            procs, ROUTER, [worker_flag(f) + worker_extra for f in self.engines], *router_flags)
        self.sent = 0
        self.settle(prime=True)

    def engine_blocks(self, i):
        status, body, _ = http("GET", f"http://{self.wids[i]}/debug/kv-blocks")
        return json.loads(body)["ranks"][0]["block_count"] if status == 200 else -2

    def view(self, i):
        status, body, _ = http("GET", f"{self.base}/v1/admin/cache-view/{self.wids[i]}")
        return json.loads(body)["block_count"] if status == 200 else -1

    def settle(self, prime=False):
        """Polls until the router's view of each engine holds what the engine caches.
        prime: first send each engine a unique prompt directly, so a first batch the
        router's SUB joined too late for (ZMQ slow joiner) shows up as a gap it replays."""
        for attempt in range(5):
            if prime or attempt > 0:
                for i in range(2):
                    self.sent += 1
                    http("POST", f"http://{self.wids[i]}/v1/completions",
                         {"model": "mock-model", "max_tokens": 1,
                          "prompt": [90000 + 100 * self.sent + j for j in range(2 * BLOCK)]})
            try:
                poll(lambda: all(self.view(i) == self.engine_blocks(i) >= 0 for i in range(2)),
                     "the router's views hold what the engines cache", timeout=5)
                return
            except AssertionError:
                continue
        raise AssertionError("the router's views never caught up with the engines")

    def ask(self, rid, prompt, auth=None, salt=None, model="mock-model", settle=True):
        """One completion; returns (cached_tokens the engine reported, worker id, the
        pick's cache_hits)."""
        body = {"model": model, "prompt": prompt, "max_tokens": 2}
        if salt is not None:
            body["cache_salt"] = salt
        headers = {"X-Infera-Request-Id": rid}
        if auth is not None:
            headers["Authorization"] = auth
        status, text, h = http("POST", self.base + "/v1/completions", body, headers=headers)
        check(status == 200, f"{rid} answered 200 ({status}: {text[:200]})")
        line = poll(lambda: self.router.grep(rf"pick policy=kv-aware .*request_id={rid} "),
                    f"{rid}'s pick is logged")[0]
        hits = int(re.search(r"cache_hits=(\d+)", line).group(1))
        if settle:
            self.settle()
        return json.loads(text)["usage"]["prompt_tokens_details"]["cached_tokens"], \
            h["X-Infera-Worker-Id"], hits

    def bodies_received(self):
        """The bodies of the generation requests the engines received (their last 64)."""
        out = []
        for wid in self.wids:
            status, body, _ = http("GET", f"http://{wid}/debug/requests")
            out += [r["body"] for r in json.loads(body)]
        return out

    def salt_sent_with(self, prompt):
        """The cache_salt the engine received with `prompt`."""
        return [b.get("cache_salt") for b in self.bodies_received() if b.get("prompt") == prompt][0]


def test_option_on():
    with Processes() as procs:
        key = os.path.join(procs.dir, "salt.key")
        with open(key, "w") as f:
            f.write("a-secret-key-of-the-deployment-0123456789\n")
        fleet = Fleet(procs, router_flags=("--tenant-cache-salt", "header:Authorization",
                                           "--tenant-cache-salt-key-file", key))
        a, b = "Bearer sk-tenant-a", "Bearer sk-tenant-b"
        cached, wa, hits = fleet.ask("on-a1", PREFIX + [1, 2, 3], a)
        check(cached == 0 and hits == 0, "tenant A's first request is cold")
        cached, w, hits = fleet.ask("on-a2", PREFIX + [4, 5, 6], a)
        check(w == wa and hits == 8 and cached == FULL_HIT,
              f"A's repeat is predicted and served from A's cache (hits={hits}, cached={cached})")
        cached, wb, hits = fleet.ask("on-b1", PREFIX + [7, 8, 9], b)
        check(hits == 0, "B's guess of A's prefix draws no predicted hit (cache_hits=0)")
        check(cached == 0, f"B's guess gets no cached tokens (it went to {wb}, A's is {wa})")
        # B learns A's salt (the engines see it) and sends it as its own cache_salt: the
        # router derives B's salt from it, never uses it as it is.
        salt_a = fleet.salt_sent_with(PREFIX + [4, 5, 6])
        check(salt_a == fleet.salt_sent_with(PREFIX + [1, 2, 3]) and len(salt_a) == 43,
              "both of A's requests reached the engine with one 43-character salt")
        check(fleet.salt_sent_with(PREFIX + [7, 8, 9]) != salt_a, "B's salt is another")
        cached, _, hits = fleet.ask("on-b2", PREFIX + [10, 11], b, salt=salt_a)
        check(hits == 0 and cached == 0, "B sending A's salt as cache_salt still gets nothing")
        cached, _, hits = fleet.ask("on-b3", PREFIX + [7, 8, 9], b)
        check(hits == 8 and cached == FULL_HIT, "B's repeat of its own prompt hits its own cache")
        cached, _, hits = fleet.ask("on-anon", PREFIX + [12], None)
        check(hits == 0 and cached == 0, "a request without the header (its own tenant) gets nothing")
        routed = [b for b in fleet.bodies_received() if b["prompt"][:len(PREFIX)] == PREFIX]
        check(len(routed) == 6 and all(len(b.get("cache_salt", "")) == 43 for b in routed),
              f"every routed request reached its engine with a 43-character salt ({len(routed)})")
        body = b'{"model": "mock-model", "prompt": [1, 2, 3]}'
        reply = raw(int(fleet.base.rsplit(":", 1)[1]),
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Authorization: Bearer a\r\nAuthorization: Bearer b\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n"
                    b"Connection: close\r\n\r\n" + body)
        check(reply.startswith(b"HTTP/1.1 400") and b"more than once" in reply,
              "a repeated Authorization header is refused with 400")


def test_option_off():
    with Processes() as procs:
        fleet = Fleet(procs)
        a, b = "Bearer sk-tenant-a", "Bearer sk-tenant-b"
        _, wa, _ = fleet.ask("off-a1", PREFIX + [1, 2, 3], a)
        cached, wb, hits = fleet.ask("off-b1", PREFIX + [7, 8, 9], b)
        check(wb == wa and hits == 8 and cached == FULL_HIT,
              "default flags, no salts: B's guess is steered to A's worker and served from "
              f"A's cache (hits={hits}, cached={cached}): the side channel is open")
        # A client's own cache_salt is honoured at the default flags.
        other = list(range(7000, 7000 + 8 * BLOCK))
        cached, wa, hits = fleet.ask("off-a2", other + [1], a, salt="secret-of-a")
        check(cached == 0 and hits == 0, "A's salted prompt is cold")
        cached, _, hits = fleet.ask("off-b2", other + [2], b)
        check(hits == 0 and cached == 0, "B's unsalted guess of A's salted prefix gets nothing")
        cached, _, hits = fleet.ask("off-b3", other + [3], b, salt="a-guess")
        check(hits == 0 and cached == 0, "B's guess under another salt gets nothing")
        cached, w, hits = fleet.ask("off-a3", other + [4], a, salt="secret-of-a")
        check(w == wa and hits == 8 and cached == FULL_HIT,
              "A's salted repeat is routed by (salt, tokens) to its warm worker and hits")
        status, text, _ = http("POST", fleet.base + "/v1/completions",
                               {"model": "mock-model", "prompt": [1], "cache_salt": ""})
        check(status == 400 and "cache_salt" in text, "an empty cache_salt is refused as vLLM does")


def test_salt_blind_wire():
    with Processes() as procs:
        fleet = Fleet(procs, engine_flags=("--kv-events-extra-keys", "false"),
                      router_flags=("--tenant-cache-salt", "header:Authorization"))
        a = "Bearer sk-tenant-a"
        _, wa, _ = fleet.ask("blind-a1", PREFIX + [1], a)
        check(fleet.view(fleet.wids.index(wa)) >= 8, "the router's view holds A's blocks")
        cached, _, hits = fleet.ask("blind-a2", PREFIX + [2], a)
        check(hits == 0, "no extra_keys on the wire: the router predicts no hit for a salted "
                         "chain it cannot attribute (the safe side)")
        # The engine itself still isolates and serves A's repeat where A's blocks are.
        idx = fleet.wids.index(wa)
        status, text, _ = http("POST", f"http://{wa}/v1/completions",
                               {"model": "mock-model", "prompt": PREFIX + [3], "max_tokens": 1,
                                "cache_salt": fleet.salt_sent_with(PREFIX + [1])})
        check(status == 200 and
              json.loads(text)["usage"]["prompt_tokens_details"]["cached_tokens"] == FULL_HIT,
              f"engine {idx} serves A's prefix to A's salt")


def test_lora():
    with Processes() as procs:
        fleet = Fleet(procs, engine_flags=("--lora-modules", "sql-lora=/adapters/sql"),
                      worker_extra=",lora_adapters=sql-lora")
        _, w_base, _ = fleet.ask("lora-base1", PREFIX + [1], model="mock-model")
        cached, w_lora, hits = fleet.ask("lora-1", PREFIX + [2], model="sql-lora")
        check(hits == 0 and cached == 0,
              f"the adapter's request draws no hit from the base model's blocks ({w_lora})")
        cached, w, hits = fleet.ask("lora-2", PREFIX + [3], model="sql-lora")
        check(w == w_lora and hits == 8 and cached == FULL_HIT,
              "the same adapter's repeat is predicted and served on its worker")
        cached, w, hits = fleet.ask("lora-base2", PREFIX + [4], model="mock-model")
        check(w == w_base and hits == 8 and cached == FULL_HIT,
              "the base model's repeat hits the base model's blocks only")
        status, _, _ = http("POST", fleet.base + "/v1/completions",
                            {"model": "no-such-adapter", "prompt": [1]})
        check(status == 404, "an adapter no worker serves is an unknown model (404)")


if __name__ == "__main__":
    test_option_on()
    test_option_off()
    test_salt_blind_wire()
    test_lora()
    print("tenant_isolation_test: all passed", flush=True)
