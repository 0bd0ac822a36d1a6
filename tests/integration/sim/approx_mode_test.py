#!/usr/bin/python3
"""Approximate mode through the real router (issue 16, doc/approx-mode.md).

Four real mock engines; routers with `--kv-event-transport none` (no KV events read):
1. at the default flags (approximate mode, --approx-ttl-s 120): a prompt repeated
   after other traffic goes back to the worker that served it, the pick log counts
   its blocks as hits, the engine served them from its cache, and the approx
   counters say what was recorded;
2. with --approx-ttl-s 0 (no cache term): the repeat counts no hit.

Usage: approx_mode_test.py BUILD_DIR
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, binaries, check, http, metric, poll,  # noqa: E402
                     start_engine, start_router, worker_flag)

BLOCK = 16


def completion(base, prompt):
    status, text, headers = http("POST", base + "/v1/completions",
                                 {"model": "mock-model", "prompt": prompt, "max_tokens": 2})
    check(status == 200, f"completion answered 200 ({status}: {text[:200]})")
    return json.loads(text), headers["X-Infera-Worker-Id"]


def prompt(seed, blocks):
    return [seed * 10000 + i for i in range(blocks * BLOCK)]


def picks(router):
    return router.grep(r"pick policy=kv-aware ")


def hits_of(line):
    return int(re.search(r"cache_hits=(\d+)", line).group(1))


def run(procs, router_bin, engines, name, *flags):
    router, base = start_router(procs, router_bin, [worker_flag(f) for f in engines],
                                "--kv-event-transport", "none", *flags, name=name)
    shared = prompt(1, 24)
    _, first = completion(base, shared)
    # Other prompts in between: by load they spread over the fleet.
    for seed in range(2, 8):
        completion(base, prompt(seed, 8))
    answer, again = completion(base, shared)
    lines = poll(lambda: len(picks(router)) == 8 and picks(router), f"{name}: 8 picks logged")
    return router, base, first, again, answer, lines


def main():
    build = sys.argv[1]
    _, engine_bin, router_bin = binaries(build)
    with Processes() as procs:
        engines = [start_engine(procs, engine_bin, f"engine{i}", "--speedup", "50")[1]
                   for i in range(4)]

        router, base, first, again, answer, lines = run(procs, router_bin, engines, "router-approx")
        check(router.grep(r"approximate mode"), "the router says it runs approximate mode")
        check(hits_of(lines[0]) == 0, "the first request: no predicted hit")
        check(again == first, f"the repeat goes back to the worker that served it ({again} vs "
                              f"{first})")
        check(hits_of(lines[-1]) == 24, f"the repeat's 24 blocks are predicted hits "
                                        f"({lines[-1]})")
        cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(cached >= 23 * BLOCK, f"the engine served the prefix from its cache ({cached})")
        recorded = metric(base, "infera_router_approx_blocks_recorded_total")
        check(recorded == 24 + 6 * 8, f"every new block was recorded once ({recorded})")
        check(metric(base, "infera_kv_events_messages_total") == 0, "no KV event was read")

        # Caches reset, so the second router's repeat would be an engine hit anywhere.
        for f in engines:
            status, _, _ = http("POST", f"http://127.0.0.1:{f['port']}/reset_prefix_cache")
            check(status == 200, "engine cache reset")
        router, base, first, again, _, lines = run(procs, router_bin, engines, "router-off",
                                                   "--approx-ttl-s", "0")
        check(not router.grep(r"approximate mode"), "--approx-ttl-s 0: approximate mode is off")
        check(all(hits_of(l) == 0 for l in lines), "--approx-ttl-s 0: no pick counts a hit")
        check(metric(base, "infera_router_approx_blocks_recorded_total") is None,
              "--approx-ttl-s 0: no approx counters")
    print("all passed")


if __name__ == "__main__":
    main()
