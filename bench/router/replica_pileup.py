#!/usr/bin/python3
"""Router replicas piling onto one worker, with and without --router-replica-sync
(issue 16, doc/replica-sync.md "Measured"). Side by side in one run:

  one router       one infera-router behind nginx (the reference: what one router does)
  3 replicas       three infera-routers behind nginx round-robin, each on its own load
  3 replicas sync  the same with --router-replica-sync (NATS core, Debian nats-server)

Every router has default flags otherwise (kv-aware, --load-term work). Four
infera-mock-engines (--speedup S). Per burst: a new system prompt of --system-blocks
blocks is first cached on one worker (one request; the bench waits until every router's
view has it), then --burst requests sharing it, each with its own --suffix-blocks
blocks, are sent through nginx --spacing-ms apart (0: all at once), streamed; the
bench records each request's worker (X-Infera-Worker-Id), TTFT and end.

Prints a Markdown table: share of the burst requests on the warm worker (the one that
cached the system prompt), the most requests one worker held at once (from the
client's start/end times), the busiest worker's share, TTFT mean / p90 (ms).
Bounded: every wait has a deadline; the processes are stopped at the end.
"""
import argparse
import http.client as httpclient
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/integration"))
from harness import Processes, free_port, http, poll, start_engine, start_router, worker_flag  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--router", required=True)
ap.add_argument("--engine", required=True)
ap.add_argument("--workers", type=int, default=4)
ap.add_argument("--bursts", type=int, default=6)
ap.add_argument("--burst", type=int, default=24)
ap.add_argument("--system-blocks", type=int, default=32)
ap.add_argument("--suffix-blocks", type=int, default=8)
ap.add_argument("--max-tokens", type=int, default=16)
ap.add_argument("--spacing-ms", type=float, default=10)
ap.add_argument("--speedup", default="2")
ap.add_argument("--configs", default="one,replicas,sync")
ap.add_argument("--router-flag", action="append", default=[],
                help="an extra flag for every router (repeatable), e.g. --router-flag=--router-replica-flush-ms=5")
args = ap.parse_args()
BLOCK = 16


def nginx(procs, tmp, ports):
    port = free_port()
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log;
daemon off;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  upstream routers {{ {''.join(f'server 127.0.0.1:{p}; ' for p in ports)} }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://routers; proxy_http_version 1.1;
                 proxy_set_header Connection ""; proxy_buffering off; proxy_read_timeout 120s; }}
  }}
}}
""")
    procs.start("nginx", ["nginx", "-c", conf, "-p", tmp])

    def forwards():
        try:
            return http("GET", f"http://127.0.0.1:{port}/health")[0] == 200
        except OSError:
            return False
    poll(forwards, "nginx forwards")
    return port


def tokens(seed, blocks):
    return [(seed * 7919 + i) % 150000 + 1000 for i in range(blocks * BLOCK)]


def stream(port, prompt, out, key):
    t0 = time.time()
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions",
                 json.dumps({"model": "mock-model", "prompt": prompt, "max_tokens": args.max_tokens,
                             "stream": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    worker = resp.getheader("X-Infera-Worker-Id")
    ttft = None
    while True:
        line = resp.readline()
        if not line:
            break
        if ttft is None and line.startswith(b"data: {"):
            ttft = time.time() - t0
    conn.close()
    out[key] = {"worker": worker, "status": resp.status, "start": t0, "end": time.time(),
                "ttft": ttft}


def view_blocks(base, worker):
    status, body, _ = http("GET", f"{base}/v1/admin/cache-view/{worker}")
    return json.loads(body)["block_count"] if status == 200 else -1


def run(name, extra, replicas, procs, tmp, workers):
    bases = []
    for i in range(replicas):
        _, base = start_router(procs, args.router, workers, *extra, *args.router_flag,
                               name=f"{name}-router{i}")
        bases.append(base)
    if "--router-replica-sync" in extra:
        for b in bases:
            poll(lambda b=b: re.search(rf"^infera_router_replica_peers {replicas - 1}$",
                                       http("GET", b + "/metrics")[1], re.M), "peers found")
    os.makedirs(os.path.join(tmp, name), exist_ok=True)
    port = nginx(procs, os.path.join(tmp, name), [int(b.rsplit(":", 1)[1]) for b in bases])
    results = []
    for b in range(args.bursts):
        seed = (1 + list(("one", "replicas", "sync")).index(name)) * 100000 + b * 100
        system = tokens(seed, args.system_blocks)
        # Cache the system prompt on one worker and wait until every router's view has it.
        warm = {}
        stream(port, system + tokens(seed + 99, 1), warm, 0)
        warm_worker = warm[0]["worker"]
        for base in bases:
            poll(lambda base=base: view_blocks(base, warm_worker) >= args.system_blocks,
                 "views hold the system prompt", timeout=20)
        out = {}
        threads = []
        for i in range(args.burst):
            t = threading.Thread(target=stream, args=(port, system + tokens(seed + 1 + i,
                                                                            args.suffix_blocks),
                                                      out, i))
            t.start()
            threads.append(t)
            if args.spacing_ms > 0:
                time.sleep(args.spacing_ms / 1000)
        for t in threads:
            t.join(timeout=120)
        # Idle again (every guard released) before the next burst.
        for base in bases:
            poll(lambda base=base: re.search(r"^infera_router_pending_pick_guards 0$",
                                             http("GET", base + "/metrics")[1], re.M),
                 "router idle", timeout=30)
        results.append((warm_worker, list(out.values())))
    return results


def summarize(results):
    on_warm = total = 0
    max_inflight = []
    busiest = []
    ttfts = []
    for warm_worker, reqs in results:
        per = {}
        for r in reqs:
            per.setdefault(r["worker"], []).append(r)
            total += 1
            on_warm += r["worker"] == warm_worker
            if r["ttft"] is not None:
                ttfts.append(r["ttft"] * 1000)
        busiest.append(max(len(v) for v in per.values()) / len(reqs))
        most = 0
        for v in per.values():
            events = sorted([(r["start"], 1) for r in v] + [(r["end"], -1) for r in v])
            cur = 0
            for _, d in events:
                cur += d
                most = max(most, cur)
        max_inflight.append(most)
    ttfts.sort()
    return {"on_warm": on_warm / total, "busiest": statistics.mean(busiest),
            "max_inflight": statistics.mean(max_inflight),
            "max_inflight_max": max(max_inflight),
            "ttft_mean": statistics.mean(ttfts), "ttft_p90": ttfts[int(0.9 * (len(ttfts) - 1))]}


def main():
    configs = {"one": ("one router", [], 1), "replicas": ("3 replicas", [], 3),
               "sync": ("3 replicas + sync", ["--router-replica-sync"], 3)}
    rows = []
    load = os.getloadavg()
    for key in args.configs.split(","):
        label, extra, replicas = configs[key]
        with Processes() as procs:
            tmp = procs.dir
            nats_port = free_port()
            nats = procs.start("nats", ["nats-server", "-a", "127.0.0.1", "-p", str(nats_port)])
            nats.wait_line(r"Server is ready")
            nats_url = f"nats://127.0.0.1:{nats_port}"
            workers = []
            for i in range(args.workers):
                _, f = start_engine(procs, args.engine, f"{key}-engine{i}", "--speedup", args.speedup,
                                    "--num-gpu-blocks", "65536")
                workers.append(worker_flag(f))
            extra = extra + (["--nats-server", nats_url] if extra else [])
            res = run(key, extra, replicas, procs, tmp, workers)
            s = summarize(res)
            rows.append((label, s))
            print(f"{label}: {json.dumps(s)}", flush=True)
    print()
    print(f"{args.workers} mock engines (--speedup {args.speedup}), {args.bursts} bursts x "
          f"{args.burst} requests {args.spacing_ms} ms apart, system prompt "
          f"{args.system_blocks} blocks cached on one worker, {args.suffix_blocks} own blocks "
          f"each, max_tokens {args.max_tokens}; load at start {load[0]:.2f}")
    print()
    print("| routers | on the warm worker | busiest worker's share | most in flight on one "
          "worker (mean / max over bursts) | TTFT mean (ms) | TTFT p90 (ms) |")
    print("|---|---|---|---|---|---|")
    for label, s in rows:
        print(f"| {label} | {s['on_warm']:.0%} | {s['busiest']:.0%} | {s['max_inflight']:.1f} / "
              f"{s['max_inflight_max']} | {s['ttft_mean']:.1f} | {s['ttft_p90']:.1f} |")


if __name__ == "__main__":
    main()
