#!/usr/bin/python3
"""Render parity end to end (doc/render-parity.md; spec "Decode input-demand routing",
architecture §7): the real infera-router with only --router-tokenizer-path (the Qwen 3
files) and three real mock engines on the same files.
Usage: render_parity_test.py BUILD_DIR TOKENIZER_DIR

1. Probes at discovery: a vLLM engine with --render-differently (one more token at the
   end of every rendering) is "diverged" in /v1/workers and
   infera_router_render_parity 0; a faithful vLLM engine (vLLM's chat shape) and a
   faithful SGLang engine (SGLang's prompt shape: its mock refuses `messages`) are
   "exact" (1); infera_router_render_parity_probes_total counts the outcomes.
2. Overlap of the diverged worker is not trusted: a long chat cached in full on the
   diverged engine and in half on the exact vLLM engine goes to the exact one (the
   half holder). The same construction with a trusted full holder (the SGLang engine)
   goes to the full holder, so it is the distrust that decides, not the construction.
3. --render-parity-interval-s 0.2 (a second router): the diverged engine restarted on
   its port without the flag is "exact" again at the next probe; the first router, at
   the default 300 s, still shows "diverged".
4. PD with --decode-input-demand shadow: the decode pick on a diverged worker counts
   its input as estimated (infera_router_decode_demand_decisions_total{input=...}).
Waits are bounded polls; no fixed sleeps.
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, binaries, check, http, poll, start_engine, start_router,  # noqa: E402
                     worker_flag)

BUILD = sys.argv[1]
TOKENIZER = sys.argv[2]
_, ENGINE, ROUTER = binaries(BUILD)
BLOCK = 16


def long_text(seed, n_words):
    words = ["harbour", "ledger", "customs", "pallet", "invoice", "freight", "manifest",
             "berth", "tariff", "consignee", "voyage", "crane", "dock", "bill"]
    return " ".join(f"{words[(seed * 5 + i * 3) % len(words)]}-{(seed * 131 + i * 17) % 991}"
                    for i in range(n_words))


def cache_view(base, wid):
    status, body, _ = http("GET", f"{base}/v1/admin/cache-view/{wid}")
    return json.loads(body)["block_count"] if status == 200 else -1


def post(url, body):
    status, text, headers = http("POST", url, body)
    check(status == 200, f"POST {url} answered 200 ({status}: {text[:160]})")
    return json.loads(text), headers


class Fleet:
    def __init__(self, procs):
        self.procs = procs
        self.engines = {}  # name -> (port, worker id)
        self.unique = 0

    def engine(self, name, *extra):
        _, f = start_engine(self.procs, ENGINE, name, "--tokenizer", TOKENIZER,
                            "--num-gpu-blocks", "2048", "--speedup", "50", *extra)
        self.engines[name] = (int(f["port"]), f"127.0.0.1:{f['port']}")
        return f

    def url(self, name):
        return f"http://127.0.0.1:{self.engines[name][0]}"

    def wid(self, name):
        return self.engines[name][1]

    def view_grows(self, base, name, before, blocks, what):
        """Polls until the router's view of `name` holds `blocks` more than `before`; a
        ZMQ subscriber may join after an engine's first batch (a gap is repaired when
        the next batch shows it), so a small unique prompt is sent now and then."""
        for _ in range(10):
            try:
                return poll(lambda: cache_view(base, self.wid(name)) >= before + blocks and
                            cache_view(base, self.wid(name)), what, timeout=2)
            except AssertionError:
                self.unique += 1
                post(self.url(name) + "/v1/completions",
                     {"model": "mock-model", "max_tokens": 1,
                      "prompt": [70000 + 100 * self.unique + j for j in range(BLOCK)]})
                before += 1
        raise AssertionError("timed out: " + what)


def verdicts_of(base):
    _, body, _ = http("GET", base + "/v1/workers")
    return {w["worker_id"]: w.get("render_parity") for w in json.loads(body)["workers"]}


def chat_body(seed):
    return {"model": "mock-model", "max_tokens": 2, "messages": [
        {"role": "system", "content": long_text(seed, 160)},
        {"role": "user", "content": f"Where is shipment {seed}?"}]}


def cache_split(fleet, base, body, full, half):
    """Caches the chat `body` in full on engine `full` (its own rendering) and the first
    half of the router's blocks on engine `half` (token ids from the exact engine's
    /tokenize, which renders as the router does). Returns the router's block count."""
    ids = post(fleet.url("exact") + "/tokenize", {"model": "mock-model",
                                                  "messages": body["messages"]})[0]["tokens"]
    blocks = len(ids) // BLOCK
    check(blocks >= 20, f"the prompt is long: {blocks} blocks")
    before_full = cache_view(base, fleet.wid(full))
    before_half = cache_view(base, fleet.wid(half))
    post(fleet.url(full) + "/v1/chat/completions", body)
    post(fleet.url(half) + "/v1/completions",
         {"model": "mock-model", "max_tokens": 1, "prompt": ids[:(blocks // 2) * BLOCK]})
    fleet.view_grows(base, full, before_full, blocks, f"the router's view of {full} holds it all")
    fleet.view_grows(base, half, before_half, blocks // 2,
                     f"the router's view of {half} holds half of it")
    return blocks


def route_split(fleet, base, seed, full, expect):
    """Caches chat_body(seed) in full on `full` and in half on "exact", routes it through
    the router and checks it went to `expect`. Returns the prompt's blocks."""
    body = chat_body(seed)
    blocks = cache_split(fleet, base, body, full=full, half="exact")
    _, headers = post(base + "/v1/chat/completions", body)
    got = headers["X-Infera-Worker-Id"]
    check(got == fleet.wid(expect), f"cached in full on {full}, in half on exact: routed to "
          f"{expect} ({got})")
    return blocks


def main():
    with Processes() as procs:
        fleet = Fleet(procs)
        workers = [worker_flag(fleet.engine("exact")),
                   worker_flag(fleet.engine("diverged", "--render-differently")),
                   worker_flag(fleet.engine("sglang", "--engine", "sglang")) + ",engine=sglang"]
        router, base = start_router(procs, ROUTER, workers, "--router-tokenizer-path", TOKENIZER)

        # 1. The probes at discovery.
        def verdicts():
            v = verdicts_of(base)
            return v if "unknown" not in v.values() else None
        v = poll(verdicts, "every worker has a render-parity verdict")
        expected = {"exact": "exact", "diverged": "diverged", "sglang": "exact"}
        for name, verdict in expected.items():
            check(v[fleet.wid(name)] == verdict, f"{name}: render_parity {v[fleet.wid(name)]}")
        _, text, _ = http("GET", base + "/metrics")
        for name, verdict in expected.items():
            line = 'infera_router_render_parity{worker_id="%s"} %d' % (
                fleet.wid(name), 1 if verdict == "exact" else 0)
            check(line in text.splitlines(), f"metric: {line}")
        for outcome, n in (("exact", 2), ("diverged", 1)):
            line = 'infera_router_render_parity_probes_total{outcome="%s"} %d' % (outcome, n)
            check(line in text.splitlines(), f"metric: {line}")
        check(len(router.grep(r"render parity: worker %s renders differently" %
                              fleet.wid("diverged"))) == 1, "the divergence is logged once")

        # 2. The diverged worker's overlap draws nothing.
        blocks = route_split(fleet, base, 1, full="diverged", expect="exact")
        pick = router.grep(r"pick policy=kv-aware .*picked=%s cache_hits=%d request_blocks=%d " %
                           (fleet.wid("exact"), blocks // 2, blocks))
        check(len(pick) == 1, f"the pick credited the exact worker's half ({pick})")
        # Control: the same construction with a trusted full holder.
        route_split(fleet, base, 2, full="sglang", expect="sglang")

        # 3. --render-parity-interval-s: a second router re-probes every 0.2 s. The
        # diverged engine is restarted on its port without --render-differently: the
        # next probe clears the mark; the first router (default 300 s) still has it.
        router2, base2 = start_router(procs, ROUTER, [workers[1]], "--router-tokenizer-path",
                                      TOKENIZER, "--render-parity-interval-s", "0.2",
                                      name="router-interval")
        poll(lambda: verdicts_of(base2) == {fleet.wid("diverged"): "diverged"},
             "the interval router marks the diverged engine too")
        port = fleet.engines["diverged"][0]
        old = [p for p in procs.procs if p.name == "diverged"][0]
        old.p.terminate()
        old.p.wait(timeout=10)
        fixed = procs.start("diverged-fixed", [
            ENGINE, "--host", "127.0.0.1", "--port", str(port), "--model-name", "mock-model",
            "--tokenizer", TOKENIZER, "--kv-events-endpoint", "tcp://127.0.0.1:0"])
        fixed.wait_line(r"infera-mock-engine listening port=%d" % port)
        poll(lambda: verdicts_of(base2) == {fleet.wid("diverged"): "exact"},
             "a later exact probe clears the mark (interval router)")
        _, text, _ = http("GET", base2 + "/metrics")
        line = 'infera_router_render_parity{worker_id="%s"} 1' % fleet.wid("diverged")
        check(line in text.splitlines(), f"interval router metric: {line}")
        check(len(router2.grep(r"render parity: worker %s: exact" % fleet.wid("diverged"))) == 1,
              "the cleared mark is logged")
        check(verdicts_of(base)[fleet.wid("diverged")] == "diverged",
              "the default router has not re-probed yet (every 300 s)")
    test_decode_demand_estimates()
    print("all passed")


def test_decode_demand_estimates():
    """4. A diverged decode worker's counts are estimates for decode input demand
    (--decode-input-demand shadow: the flag under test). Prefill and decode engines both
    --render-differently (their prompts must agree with each other for the KV hand-off);
    a chat the router tokenizes exactly is counted input="estimated" on them."""
    with Processes() as procs:
        pd = ["--pd-protocol", "sglang-bootstrap", "--tokenizer", TOKENIZER,
              "--render-differently", "--speedup", "50"]
        _, p = start_engine(procs, ENGINE, "pd-prefill", "--role", "prefill", *pd)
        _, d = start_engine(procs, ENGINE, "pd-decode", "--role", "decode", *pd)
        workers = [worker_flag(p) + ",disagg_mode=prefill,disagg_protocol=sglang-bootstrap,"
                   f"bootstrap_host=127.0.0.1,bootstrap_port={p['bootstrap']}",
                   worker_flag(d) + ",disagg_mode=decode,disagg_protocol=sglang-bootstrap"]
        _, base = start_router(procs, ROUTER, workers, "--router-tokenizer-path", TOKENIZER,
                               "--decode-input-demand", "shadow", name="router-pd")
        poll(lambda: set(verdicts_of(base).values()) == {"diverged"},
             "both PD workers are marked diverged")
        post(base + "/v1/chat/completions", chat_body(3))
        _, text, _ = http("GET", base + "/metrics")
        decisions = [line for line in text.splitlines()
                     if line.startswith("infera_router_decode_demand_decisions_total{")
                     and not line.endswith(" 0")]
        check(decisions == ['infera_router_decode_demand_decisions_total{mode="shadow",'
                            'input="estimated",agrees="true"} 1'],
              f"the decode pick counted the diverged worker's input as estimated ({decisions})")


if __name__ == "__main__":
    if not os.path.exists(os.path.join(TOKENIZER, "tokenizer.json")):
        raise SystemExit(f"no tokenizer.json in {TOKENIZER} (run scripts/fetch-fixtures)")
    main()
