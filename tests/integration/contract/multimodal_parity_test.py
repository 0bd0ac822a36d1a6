#!/usr/bin/python3
"""Multimodal parity (issue 26, part 2): every endpoint that takes images handles them
alike, and the mock engine renders image/audio chats as the router does.
Usage: multimodal_parity_test.py BUILD_DIR QWEN3_TOKENIZER_DIR

1. /v1/completions with a top-level `images` list, at the router's default flags, two
   mock engines: a 1200-token prompt (75 blocks) is cached on one engine; the same
   prompt with an image must not be credited those blocks (the spec's silent
   corruption: before, `cache_hits=75 w_overlap=1.0 mm_images=0`): the pick shows
   `w_overlap=0 mm_images=1`; a second image has no affinity; the first image again
   returns to its worker (mm_affinity_hits=1), from /v1/completions and from a chat
   carrying the same top-level image (one key space for both endpoints).
   In the same fleet, Infera's cache-control factors and names (doc/router.md "Cache-control
   hints", "Infera's names"): `prompt_cache_retention: 24h` doubles the pick's overlap
   weight (w_overlap=2.0), `none` cuts it to 0.1, an Anthropic `cache_control` with a 1h
   ttl counts as long; /metrics counts infera_cache_control_seen_total{retention} and
   infera_cache_locality_skipped_total{reason="multimodal"} per kv-aware pick, and carries
   Infera's aliases infera_requests_total, infera_router_active_workers and
   infera_prefix_cache_blocks_total.
2. The mock engine with --tokenizer (the Qwen 3 fixture) serves chats with image_url
   and input_audio parts (200, usage counted), and its /tokenize ids for them equal
   `infera-router render --tokens` on the same body: the engine and the router flatten
   multimodal parts the same way (placeholders, doc/chat-template.md).
"""
import json
import os
import re
import subprocess
import sys
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, binaries, check, http, poll, start_engine,  # noqa: E402
                     start_router, worker_flag)

BUILD, FIXTURE = sys.argv[1], sys.argv[2]
_, ENGINE, ROUTER = binaries(BUILD)
PICK = re.compile(r"pick policy=kv-aware role=mixed request_id=(\S+) picked=(\S+) "
                  r"cache_hits=(\d+) request_blocks=(\d+) .*w_overlap=(\S+) mm_images=(\d+) "
                  r"mm_affinity_hits=(\d+)")
PROMPT = list(range(1000, 1000 + 1200))  # 75 blocks of 16


def post(base, router, path, body, rid):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "X-Infera-Request-Id": rid})
    with urllib.request.urlopen(req, timeout=60) as r:
        check(r.status == 200, f"{path} {rid}: 200")
        r.read()
    m = PICK.search(router.wait_line(r"request_id=%s " % re.escape(rid)).string)
    picked, hits, blocks, w, images, affinity = m.group(2), *map(int, m.group(3, 4)), \
        float(m.group(5)), *map(int, m.group(6, 7))
    return {"picked": picked, "hits": hits, "blocks": blocks, "w": w, "images": images,
            "affinity": affinity}


def completions_images(procs):
    engines = [start_engine(procs, ENGINE, f"engine{i}")[1] for i in range(2)]
    router, base = start_router(procs, ROUTER, [worker_flag(f) for f in engines])
    warm = post(base, router, "/v1/completions",
                {"model": "mock-model", "prompt": PROMPT, "max_tokens": 2}, "warm")
    poll(lambda: json.loads(http("GET", f"{base}/v1/admin/cache-view/{warm['picked']}")[1])
         .get("block_count", 0) >= 75, "the prompt's 75 blocks are in the router's view")
    again = post(base, router, "/v1/completions",
                 {"model": "mock-model", "prompt": PROMPT, "max_tokens": 2}, "again")
    check(again["picked"] == warm["picked"] and again["hits"] == 75 and again["w"] == 1.0,
          f"text only: the repeat hits its 75 blocks ({again})")
    img_a, img_b = "http://images.invalid/a.png", "http://images.invalid/b.png"
    first = post(base, router, "/v1/completions",
                 {"model": "mock-model", "prompt": PROMPT, "images": [img_a], "max_tokens": 2},
                 "img-a")
    check(first["w"] == 0.0 and first["images"] == 1 and first["hits"] == 0 and
          first["affinity"] == 0,
          f"same text + image A: no text credit, the image counted ({first})")
    other = post(base, router, "/v1/completions",
                 {"model": "mock-model", "prompt": PROMPT, "images": [img_b], "max_tokens": 2},
                 "img-b")
    check(other["w"] == 0.0 and other["images"] == 1 and other["affinity"] == 0,
          f"same text + image B: no affinity ({other})")
    repeat = post(base, router, "/v1/completions",
                  {"model": "mock-model", "prompt": PROMPT, "images": [img_a], "max_tokens": 2},
                  "img-a-again")
    check(repeat["picked"] == first["picked"] and repeat["affinity"] == 1,
          f"image A again: back to its worker ({repeat})")
    chat = post(base, router, "/v1/chat/completions",
                {"model": "mock-model", "max_tokens": 2, "images": [img_a],
                 "messages": [{"role": "user", "content": "describe it"}]}, "chat-img-a")
    check(chat["picked"] == first["picked"] and chat["images"] == 1 and chat["affinity"] == 1,
          f"a chat with the same top-level image follows it ({chat})")
    cache_control_and_names(base, router)


def metric_value(text, sample):
    m = re.search(r"^" + re.escape(sample) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def cache_control_and_names(base, router):
    for rid, extra, w in (("ret-long", {"prompt_cache_retention": "24h"}, 2.0),
                          ("ret-none", {"prompt_cache_retention": "none"}, 0.1),
                          ("ret-key", {"prompt_cache_key": "s-1"}, 1.0)):
        got = post(base, router, "/v1/completions",
                   dict({"model": "mock-model", "prompt": PROMPT, "max_tokens": 2}, **extra), rid)
        check(got["w"] == w, f"{extra}: w_overlap={w} ({got})")
    # No tokenizer here, so no text term to scale (w_overlap=0.0 in its line): its
    # retention shows in the counter below.
    post(base, router, "/v1/messages", {
        "model": "mock-model", "max_tokens": 2,
        "system": [{"type": "text", "text": "stable", "cache_control":
                    {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": "hi"}]}, "ret-anthropic")
    text = http("GET", base + "/metrics")[1]
    seen = {r: metric_value(text, f'infera_cache_control_seen_total{{retention="{r}"}}')
            for r in ("none", "short", "long")}
    # 10 kv-aware picks: warm, again, 3 image completions, the image chat, 3 completions
    # above, the Anthropic message = 10; long: 24h + Anthropic 1h; short: the key; the
    # rest none.
    check(seen == {"none": 7.0, "short": 1.0, "long": 2.0},
          f"infera_cache_control_seen_total by retention: {seen}")
    skipped = metric_value(text, 'infera_cache_locality_skipped_total{reason="multimodal"}')
    check(skipped == 4.0, f"infera_cache_locality_skipped_total{{multimodal}} = 4 ({skipped})")
    check(metric_value(text, "infera_router_active_workers") == 2.0 and
          metric_value(text, 'infera_requests_total{router="kv-aware",outcome="success"}') == 10.0
          and (metric_value(text, 'infera_prefix_cache_blocks_total{role="mixed"}') or 0) > 0,
          "Infera's metric names: infera_router_active_workers, infera_requests_total, "
          "infera_prefix_cache_blocks_total")


def render_ids(body):
    r = subprocess.run([ROUTER, "render", "--router-tokenizer-path", FIXTURE, "--tokens"],
                       input=json.dumps(body), capture_output=True, text=True, timeout=240)
    check(r.returncode == 0, f"render --tokens: {r.stderr.strip()[:200]}")
    return json.loads(r.stdout)


def engine_image_chats(procs):
    # Loading the Qwen 3 tokenizer takes a while in the sanitizer build: a longer wait.
    engine = procs.start("engine-tok", [ENGINE, "--host", "127.0.0.1", "--port", "0",
                                        "--model-name", "mock-model", "--tokenizer", FIXTURE])
    port = engine.wait_line(r"infera-mock-engine listening port=(\d+)", timeout=240).group(1)
    base = f"http://127.0.0.1:{port}"
    bodies = {
        "image_url": {"model": "mock-model", "max_tokens": 2, "messages": [
            {"role": "system", "content": "You describe pictures."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "http://images.invalid/cat.png"}}]}]},
        "input_audio": {"model": "mock-model", "max_tokens": 2, "messages": [
            {"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF",
                                                         "format": "wav"}},
                {"type": "text", "text": "Transcribe this."}]}]},
    }
    for name, body in bodies.items():
        status, text, _ = http("POST", base + "/v1/chat/completions", body)
        check(status == 200, f"engine --tokenizer serves an {name} chat ({status} {text[:160]})")
        usage = json.loads(text)["usage"]
        status, text, _ = http("POST", base + "/tokenize",
                               {"model": "mock-model", "messages": body["messages"]})
        check(status == 200, f"engine /tokenize takes the {name} chat")
        engine_ids = json.loads(text)["tokens"]
        check(usage["prompt_tokens"] == len(engine_ids),
              f"{name}: usage counts the rendered prompt ({len(engine_ids)} tokens)")
        check(engine_ids == render_ids(body),
              f"{name}: the engine's ids equal `infera-router render --tokens`")


def main():
    with Processes() as procs:
        completions_images(procs)
    with Processes() as procs:
        engine_image_chats(procs)
    print("multimodal parity OK", flush=True)


if __name__ == "__main__":
    main()
