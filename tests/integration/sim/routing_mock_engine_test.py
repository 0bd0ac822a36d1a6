#!/usr/bin/python3
"""Routing at the default flags through the real infera-router and real mock engines
(issue 11). Usage: routing_mock_engine_test.py BUILD_DIR TOKENIZER_DIR

1. Serial repeat: four engines and a router with only --router-tokenizer-path (the
   Qwen 3 files); two identical long chat requests, the second sent once the router's
   view holds the first one's blocks: it goes to the warm worker, the engine reports
   the prefix as cached, and the cold workers' caches stay empty.
2. Image affinity for a long prompt: a ~5 KB chat with an image goes back to the
   worker that served the image, whatever its text.
3. Prediction feedback: three workers, each alone in its model's pool; one engine
   publishes its KV events under another hash seed (--kv-events-hash-seed: the
   router's hashes of its blocks never match), one uses another engine hash seed of
   its own (--engine-hash-seed: harmless, the router re-hashes token ids), one is
   faithful. After a dozen requests sharing a prefix, only the first is flagged
   drifting in /v1/workers and in infera_router_prediction_drifting, and its
   prediction error is the whole prefix; the other two predict what their engines
   report.
Waits are bounded polls; no fixed sleeps.
"""
import json
import os
import re
import sys
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, http, poll, start_engine, start_router, worker_flag  # noqa: E402

BUILD = sys.argv[1]
TOKENIZER = sys.argv[2]
ENGINE = os.path.join(BUILD, "apps/infera-mock-engine/infera-mock-engine")
ROUTER = os.path.join(BUILD, "apps/infera-router/infera-router")
BLOCK = 16


def engine(procs, *extra):
    return start_engine(procs, ENGINE, f"engine{len(procs.procs)}", "--num-gpu-blocks", "2048",
                        "--speedup", "50", *extra)


def cache_view(base, wid):
    status, body, _ = http("GET", f"{base}/v1/admin/cache-view/{wid}")
    return json.loads(body)["block_count"] if status == 200 else -1


def chat(base, body):
    status, text, headers = http("POST", base + "/v1/chat/completions", body)
    check(status == 200, f"chat answered 200 ({status}: {text[:200]})")
    return json.loads(text), headers["X-Infera-Worker-Id"]


def long_text(seed, n_words):
    # Varied words so the tokenizer makes many tokens (a repeated phrase would merge).
    words = ["shipment", "harbour", "ledger", "customs", "pallet", "invoice", "freight",
             "manifest", "container", "berth", "tariff", "consignee", "voyage", "crane"]
    return " ".join(f"{words[(seed * 7 + i * 3) % len(words)]}-{(seed * 131 + i * 17) % 997}"
                    for i in range(n_words))


def warm_up(base, model, wids):
    """Sends unique 4-block prompts until the router's view of every worker in `wids`
    holds all the blocks their engines stored: the router's SUB socket may join after
    an engine's first batch (ZMQ slow joiner), and a gap is only repaired (replayed)
    once a later batch arrives. Returns the number of warm-up requests."""
    sent = 0
    for _ in range(10):
        for _ in wids:
            completion(base, model, [90000 + 100 * sent + j for j in range(4 * BLOCK)], False)
            sent += 1
        try:
            poll(lambda: sum(cache_view(base, w) for w in wids) == 4 * sent and
                 all(cache_view(base, w) > 0 for w in wids), f"the router sees {wids}'s events",
                 timeout=3)
            return sent
        except AssertionError:
            continue
    raise AssertionError(f"the router's view of {wids} never caught up")


def test_serial_repeat():
    with Processes() as procs:
        fields = [engine(procs, "--tokenizer", TOKENIZER)[1] for _ in range(4)]
        wids = [f"127.0.0.1:{f['port']}" for f in fields]
        router, base = start_router(procs, ROUTER, [worker_flag(f) for f in fields],
                                    "--router-tokenizer-path", TOKENIZER)

        warmed = warm_up(base, "mock-model", wids)
        before = {w: cache_view(base, w) for w in wids}
        # 1. Serial repeat at the default flags.
        body = {"model": "mock-model", "max_tokens": 4, "messages": [
            {"role": "system", "content": long_text(1, 300)},
            {"role": "user", "content": "Where is shipment 42?"}]}
        first, warm = chat(base, body)
        picks = poll(lambda: len(router.grep(r"pick policy=kv-aware")) > warmed and
                     router.grep(r"pick policy=kv-aware"), "the first chat's pick is logged")
        line = picks[warmed]
        blocks = int(re.search(r"request_blocks=(\d+)", line).group(1))
        check(blocks >= 40, f"the prompt is long: {blocks} blocks")
        check(first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "first request: cold")
        poll(lambda: cache_view(base, warm) >= before[warm] + blocks,
             "the router's view holds the first prompt")
        second, again = chat(base, body)
        check(again == warm, f"the serial repeat goes back to the warm worker ({again} vs {warm})")
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(cached >= (blocks - 1) * BLOCK, f"the engine served the prefix from cache ({cached})")
        check(all(cache_view(base, w) == before[w] for w in wids if w != warm),
              "the cold workers' caches did not grow")


def test_image_affinity():
    # 2. Image affinity for long prompts (the old recent-blocks charge of a ~100-block
    # prompt outweighed the 48-block image term). Engines without the Qwen 3 files: its
    # (text-only) template refuses image parts; the router sizes image requests from
    # the text estimate either way (they are not tokenized).
    with Processes() as procs:
        fields = [engine(procs)[1] for _ in range(4)]
        router, base = start_router(procs, ROUTER, [worker_flag(f) for f in fields])
        image = {"type": "image_url", "image_url": {"url": "https://example.com/crane.png"}}

        def with_image(seed):
            return {"model": "mock-model", "max_tokens": 4, "messages": [{"role": "user", "content": [
                {"type": "text", "text": long_text(seed, 700)}, image]}]}
        _, holder = chat(base, with_image(2))
        for seed in (3, 4, 5):
            _, w = chat(base, with_image(seed))
            check(w == holder, f"long prompt {seed} with the image goes to {holder} (got {w})")
        lines = router.grep(r"pick policy=kv-aware .*mm_images=1 mm_affinity_hits=1")
        check(len(lines) == 3, f"three picks counted the image as held ({len(lines)})")
        m = re.search(r"request_blocks=(\d+)", lines[-1])
        check(int(m.group(1)) >= 100, f"the image prompts are long ({m.group(1)} blocks)")


def completion(base, model, prompt, stream):
    body = {"model": model, "prompt": prompt, "max_tokens": 2}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
        wid = r.headers["X-Infera-Worker-Id"]
    if stream:
        events = [json.loads(l[6:]) for l in text.split("\n")
                  if l.startswith("data: ") and l != "data: [DONE]"]
        usage = [e["usage"] for e in events if e.get("usage")]
        return usage[-1]["prompt_tokens_details"]["cached_tokens"], wid
    return json.loads(text)["usage"]["prompt_tokens_details"]["cached_tokens"], wid


def metric(text, name, wid):
    m = re.search(r'^%s\{worker_id="%s"\} (\S+)$' % (name, re.escape(wid)), text, re.M)
    return float(m.group(1)) if m else None


def test_prediction_feedback():
    with Processes() as procs:
        kinds = {"skewed": ["--kv-events-hash-seed", "7"],
                 "own-seed": ["--engine-hash-seed", "99"],
                 "faithful": []}
        workers, wid = [], {}
        for kind, extra in kinds.items():
            f = engine(procs, *extra)[1]
            wid[kind] = f"127.0.0.1:{f['port']}"
            workers.append(worker_flag(f, model=kind))
        _, base = start_router(procs, ROUTER, workers)
        prefix = [50000 + i for i in range(20 * BLOCK)]  # 20 shared blocks
        n = 12
        warm = {}  # warm-up answers: unique prompts, 0 predicted and 0 reported
        for kind in kinds:
            warm[kind] = warm_up(base, kind, [wid[kind]])
            before = cache_view(base, wid[kind])
            for i in range(n):
                prompt = prefix + [60000 + 100 * i + j for j in range(40)]
                cached, w = completion(base, kind, prompt, stream=i % 2 == 1)
                check(w == wid[kind], f"{kind} request {i} served by its worker")
                if i == 0:
                    poll(lambda: cache_view(base, wid[kind]) >= before + 20,
                         f"{kind}: the view has the prefix's blocks")
                else:
                    check(cached == 20 * BLOCK, f"{kind} request {i}: the engine hit the prefix")

        _, body, _ = http("GET", base + "/v1/workers")
        by_id = {w["worker_id"]: w for w in json.loads(body)["workers"]}
        for kind in kinds:
            w = by_id[wid[kind]]
            pred = w["targets"][0]["prediction"]
            samples = n + warm[kind]
            check(pred["samples"] == samples, f"{kind}: {samples} samples ({pred})")
            check(w["prediction_drifting"] == (kind == "skewed"),
                  f"{kind}: prediction_drifting is {kind == 'skewed'} ({pred})")
            check(pred["drifting"] == (kind == "skewed"), f"{kind}: the target's flag")
            if kind == "skewed":
                check(pred["relative_error"] > 0.5 and pred["predicted_tokens"] == 0 and
                      pred["reported_tokens"] == (n - 1) * 20 * BLOCK,
                      f"skewed: predicted nothing, the engine reported the prefix ({pred})")
            else:
                check(pred["relative_error"] < 0.05 and
                      pred["predicted_tokens"] == pred["reported_tokens"],
                      f"{kind}: predictions match the engine ({pred})")
        _, text, _ = http("GET", base + "/metrics")
        for kind in kinds:
            drifting = metric(text, "infera_router_prediction_drifting", wid[kind])
            error = metric(text, "infera_router_prediction_relative_error", wid[kind])
            samples = metric(text, "infera_router_prediction_samples_total", wid[kind])
            check(drifting == (1 if kind == "skewed" else 0) and samples == n + warm[kind],
                  f"{kind}: infera_router_prediction_drifting {drifting}, samples {samples}")
            check((error > 0.5) if kind == "skewed" else (error < 0.05),
                  f"{kind}: infera_router_prediction_relative_error {error}")


def main():
    if not os.path.exists(os.path.join(TOKENIZER, "tokenizer.json")):
        raise SystemExit(f"no tokenizer.json in {TOKENIZER} (run scripts/fetch-fixtures)")
    test_serial_repeat()
    test_image_affinity()
    test_prediction_feedback()
    print("all passed")


if __name__ == "__main__":
    main()
