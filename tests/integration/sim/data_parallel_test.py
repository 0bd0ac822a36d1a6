#!/usr/bin/python3
"""Data-parallel ranks end to end (issue 14, doc/data-parallel.md): the real
infera-router at its default flags and one real infera-mock-engine with --dp-size 2.

1. The worker is two targets, `<id>#dp0` and `<id>#dp1` (/v1/workers, pick log,
   metrics), each following its own event stream: the engine's ranks publish on
   consecutive ports (P, P+1; replay Q, Q+1) and the router derives rank 1's from
   the record's rank-0 endpoints.
2. A prompt goes to one rank; its blocks land in that rank's view only (cache-view
   per rank equals the engine's per-rank block count; the other rank's stays 0).
   The repeat goes back to that rank (picked=<id>#dp<r> with cache_hits > 0) and
   the engine served it from that rank's cache.
3. The engine saw the pick's rank in X-Data-Parallel-Rank on every request; a
   client's own valid rank is replaced by the pick's, an invalid one is a 400 in the
   OpenAI error shape and never reaches the engine; the engine itself rejects a rank
   it does not have.
Waits are bounded polls; no fixed sleeps.
Usage: data_parallel_test.py BUILD_DIR
"""
import json
import os
import re
import sys
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, binaries, check, http, poll, start_router  # noqa: E402

BLOCK = 16
_, ENGINE, ROUTER = binaries(sys.argv[1])


def prompt(seed, blocks):
    return [seed * 10000 + i for i in range(blocks * BLOCK)]


def post(base, body, headers=None):
    """(status, parsed body) of one /v1/completions request."""
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def completion(base, seed, blocks=8, **extra):
    status, body = post(base, {"model": "mock-model", "prompt": prompt(seed, blocks),
                               "max_tokens": 2, **extra})
    check(status == 200, f"completion {seed} answered 200 ({status}: {body})")
    return body


def get(url):
    status, text, _ = http("GET", url)
    check(status == 200, f"GET {url} is 200")
    return json.loads(text)


def main():
    with Processes() as procs:
        engine = procs.start("engine", [
            ENGINE, "--host", "127.0.0.1", "--port", "0", "--model-name", "mock-model",
            "--speedup", "50", "--dp-size", "2",
            "--kv-events-endpoint", "tcp://127.0.0.1:0",
            "--kv-replay-endpoint", "tcp://127.0.0.1:0"])
        line = engine.wait_line(r"infera-mock-engine listening .*").group(0)
        port = re.search(r"port=(\d+)", line).group(1)
        events = re.findall(r"events=tcp://127\.0\.0\.1:(\d+)", line)
        replays = re.findall(r"replay=tcp://127\.0\.0\.1:(\d+)", line)
        check(len(events) == 2 and int(events[1]) == int(events[0]) + 1 and
              len(replays) == 2 and int(replays[1]) == int(replays[0]) + 1,
              f"the engine's ranks publish on consecutive ports ({line})")
        wid = f"127.0.0.1:{port}"
        eng = f"http://{wid}"
        # The record names rank 0's endpoints only, as an engine registers them.
        flag = (f"http://{wid},worker_id={wid},model_name=mock-model,"
                f"kv_events_endpoint=tcp://127.0.0.1:{events[0]},"
                f"kv_replay_endpoint=tcp://127.0.0.1:{replays[0]},kv_block_size={BLOCK},"
                f"dp_size=2")
        router, base = start_router(procs, ROUTER, [flag])
        names = [f"{wid}#dp0", f"{wid}#dp1"]

        workers = get(base + "/v1/workers")["workers"]
        check([t["target"] for t in workers[0]["targets"]] == names and
              workers[0]["dp_size"] == 2, f"/v1/workers: one worker, targets {names}")

        def views():
            return [get(f"{base}/v1/admin/cache-view/{wid}?dp_rank={r}")["block_count"]
                    for r in (0, 1)]

        def engine_blocks():
            return [r["block_count"] for r in get(eng + "/debug/kv-blocks")["ranks"]]

        def pick(i):
            lines = poll(lambda: len(router.grep(r"pick policy=kv-aware ")) > i and
                         router.grep(r"pick policy=kv-aware "), f"pick {i} logged")
            m = re.search(r"picked=(\S+) cache_hits=(\d+)", lines[i])
            return m.group(1), int(m.group(2))

        # 1-2: the first prompt lands on one rank, in that rank's view only.
        completion(base, 1)
        first, hits = pick(0)
        check(first in names and hits == 0, f"first prompt: picked {first}, no hit")
        r = names.index(first)
        poll(lambda: views() == engine_blocks() and views()[r] >= 8,
             "the router's view of each rank equals the engine's rank (the blocks on "
             f"rank {r} only)")
        check(views()[1 - r] == 0, f"the other rank's view stays empty ({views()})")
        view = get(f"{base}/v1/admin/cache-view/{wid}?dp_rank={r}")
        check(view["target"] == first and view["dp_rank"] == r, f"cache-view names {first}")

        # Another prompt, then the repeat: back to the rank that cached it.
        completion(base, 2)
        completion(base, 3)
        poll(lambda: views() == engine_blocks() and sum(views()) >= 24,
             "views equal the engine's ranks after three prompts")
        answer = completion(base, 1)
        again, hits = pick(3)
        check(again == first and hits >= 7,
              f"the repeat goes back to {first} with cache hits ({again}, cache_hits={hits})")
        cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(cached >= 7 * BLOCK, f"the engine served it from rank {r}'s cache ({cached})")
        status, text, _ = http("GET", base + "/metrics")
        check(f'worker_id="{first}"' in text, f"metrics label the target {first}")
        bounds = re.findall(r'^infera_router_index_max_blocks\{worker_id="([^"]+)"\}', text, re.M)
        check(sorted(bounds) == sorted(names),
              f"the index bound series name every rank <id>#dp<r> too ({bounds})")

        # 3: the engine saw the pick's rank in the header on every request.
        picked = [names.index(pick(i)[0]) for i in range(4)]
        seen = [q["data_parallel_rank_header"] for q in get(eng + "/debug/requests")]
        check(seen == [str(p) for p in picked],
              f"X-Data-Parallel-Rank carried each pick's rank ({seen} vs {picked})")

        # A client's valid rank is replaced by the pick's; an invalid one is a 400.
        for i, extra in enumerate(({"X-Data-Parallel-Rank": str(1 - r)}, {})):
            status, body = post(base, {"model": "mock-model", "prompt": prompt(1, 8),
                                       "max_tokens": 2, "data_parallel_rank": 1 - r}, extra)
            check(status == 200 and pick(4 + i)[0] == first,
                  f"a client's rank {1 - r} does not move the pick off {first}")
        seen = get(eng + "/debug/requests")
        check(seen[-1]["data_parallel_rank_header"] == str(r) and
              "data_parallel_rank" not in seen[-1]["body"],
              "the engine got the pick's rank, not the client's")
        for headers, body_rank, what in (({"X-Data-Parallel-Rank": "x"}, None, "header 'x'"),
                                         ({}, -1, "body -1"), ({}, "1", "body '1'")):
            body = {"model": "mock-model", "prompt": prompt(9, 1), "max_tokens": 2}
            if body_rank is not None:
                body["data_parallel_rank"] = body_rank
            status, err = post(base, body, headers)
            check(status == 400 and err["error"]["type"] == "invalid_request_error" and
                  "must be a non-negative integer" in err["error"]["message"],
                  f"router: a client's rank {what} is 400 ({status} {err})")
        check(len(get(eng + "/debug/requests")) == len(seen),
              "no invalid request reached the engine")
        for headers, body_rank, what in (({"X-Data-Parallel-Rank": "2"}, None, "header 2"),
                                         ({"X-Data-Parallel-Rank": "1x"}, None, "header 1x"),
                                         ({}, 2, "body 2"), ({}, -1, "body -1")):
            body = {"model": "mock-model", "prompt": prompt(9, 1), "max_tokens": 2}
            if body_rank is not None:
                body["data_parallel_rank"] = body_rank
            status, err = post(eng, body, headers)
            check(status == 400 and "error" in err, f"engine: rank {what} is 400 ({err})")
    print("all passed")


if __name__ == "__main__":
    main()
