#!/usr/bin/python3
"""Fleet-scale harness (doc/perf-scale.md): a simulated fleet of N targets (workers x
DP ranks) publishing KV events over ZMQ (vLLM's wire, replay sockets) into the real
infera-router, which routes requests to one real infera-mock-engine.

Processes: `scale_fleet` shards (bench/scale/scale_fleet.cc: each binds a PUB and a
replay ROUTER per target and publishes what it is told on stdin), one infera-mock-engine
(every simulated worker's HTTP url points at it, and it is a worker of its own with
its own KV events, so a repeated prompt is a real cache hit), infera-router with a
--workers-file listing them all.

Phases and what is reported (one `result` JSON line at the end, with --json FILE too):
  base     router up with every target subscribed, views empty: RSS (the fixed base)
  fill     each target stores --view-blocks blocks (at --fill-rate blocks/s, 0 = as fast
           as the fleet publishes): blocks/s applied (router counters), RSS and bytes per
           (target, block) in view above the base
  churn    --churn-s seconds at --rate blocks/s (stores + as many evictions; 0 = as fast
           as the fleet publishes): the router's applied blocks/s over the window,
           view lag p50/p99 (at each /metrics poll, how long ago the fleet had published
           what the router has applied by then), pick latency (the router's own
           infera_router_routing_overhead_seconds{stage="hash_match"} histogram over the
           window: bucket bounds) while a client sends requests, the client's latency
  restart  a prompt sent twice (the second hits), kill -9, the same command again:
           ms to /ready 200, the first request's pick log cache_hits, views after it.
           With --snapshot the router runs with --kv-snapshot-path (doc/snapshot.md):
           the kill comes after a periodic snapshot that began after the probe, and the
           restart also reports the restore s, restored blocks, verify outcomes, the
           file's size and the last write's duration
  join     (--join, implies --snapshot) before the kill: a nats-server runs from the start
           and the router has --router-replica-sync; once its periodic snapshot is
           written, a second router (its own --kv-snapshot-path, no file) starts with
           --kv-snapshot-peer-join (doc/snapshot.md §9.1): ms to its /ready 200, the
           fetch (bytes, ms), its restore s and verify outcomes, the probe's cache_hits
           through it; then it is killed and the restart phase runs as without --join

No timing assertions; --check asserts only what is exact: every block published was
applied, the repeated prompt hits before and after the restart, the views are whole
after the restart when the fleet's replay buffers held their history.

Usage: fleet_scale.py --router R --engine E --fleet F [--workers 512 --dp 8]
                      [--view-blocks 2441] [--rate 0] [--churn-s 20] [--check]
                      [--snapshot [--snapshot-interval-s 5]] [--join]
                      [--router-arg=--kv-ingest-threads --router-arg=2]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "integration"))
from harness import Processes, check, free_port, http, poll  # noqa: E402

TARGETS_PER_SHARD = 2048  # each target: ~5 descriptors of the 20,000 a process may hold


def rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def huge_kb(pid):
    """Anonymous memory backed by transparent huge pages (smaps_rollup), KiB."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid):
    """CPU seconds (user + system, every thread) the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scalar(body, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def labeled(body, name, value):
    """A metric's value for label result= or reason= `value` (0 when absent)."""
    m = re.search(rf'^{name}{{\w+="{value}"}} (\S+)$', body, re.M)
    return float(m.group(1)) if m else 0


def family_sum(body, name):
    return sum(float(v) for v in re.findall(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$",
                                            body, re.M))


def buckets(body, stage):
    """{le: cumulative count} of the routing-overhead histogram's `stage` series."""
    out = {}
    for le, v in re.findall(r'^infera_router_routing_overhead_seconds_bucket\{stage="' +
                            re.escape(stage) + r'",le="([^"]+)"\} (\S+)$', body, re.M):
        out[float("inf") if le == "+Inf" else float(le)] = float(v)
    return out


def quantile_bound(before, after, q):
    """Upper bound of the bucket holding quantile q of the observations between two
    scrapes (None when there were none)."""
    les = sorted(after)
    total = after[les[-1]] - before.get(les[-1], 0)
    if total <= 0:
        return None, 0
    for le in les:
        if after[le] - before.get(le, 0) >= q * total:
            return le, int(total)
    return float("inf"), int(total)


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


class Shard:
    """One scale_fleet process: commands on stdin, progress read by a thread."""

    def __init__(self, argv, log):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(log, "w"), text=True, bufsize=1)
        self.progress = [(0.0, 0)]  # (monotonic s, blocks published), increasing
        self.lines = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            parts = line.split()
            with self.cv:
                if parts and parts[0] == "p":
                    self.progress.append((float(parts[1]), int(parts[2])))
                else:
                    self.lines.append(line.strip())
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()  # exited: a waiter sees it now

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def wait(self, prefix, timeout):
        deadline = time.time() + timeout
        with self.cv:
            while True:
                for line in self.lines:
                    if line.startswith(prefix):
                        self.lines.remove(line)
                        return line
                if self.p.poll() is not None:
                    raise AssertionError(f"scale_fleet exited with {self.p.returncode}")
                left = deadline - time.time()
                if left <= 0:
                    raise AssertionError(f"scale_fleet: no '{prefix}' within {timeout} s")
                self.cv.wait(min(left, 1.0))

    def published(self):
        with self.cv:
            return self.progress[-1][1]

    def stop(self):
        if self.p.poll() is None:
            try:
                self.send("quit")
                self.p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()


def published_at(shards, t):
    """Blocks the whole fleet had published at monotonic time t (step functions)."""
    total = 0
    for s in shards:
        with s.cv:
            prog = list(s.progress)
        lo, hi = 0, len(prog) - 1
        while lo < hi:  # last entry with time <= t
            mid = (lo + hi + 1) // 2
            if prog[mid][0] <= t:
                lo = mid
            else:
                hi = mid - 1
        total += prog[lo][1] if prog[lo][0] <= t else 0
    return total


def time_published(shards, blocks):
    """Earliest monotonic time at which the fleet had published `blocks` (None: not yet)."""
    events = sorted(set(t for s in shards for t, _ in list(s.progress)))
    lo, hi = 0, len(events) - 1
    if not events or published_at(shards, events[-1]) < blocks:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if published_at(shards, events[mid]) >= blocks:
            hi = mid
        else:
            lo = mid + 1
    return events[lo]


class Router:
    def __init__(self, procs, argv, name):
        self.t_start = time.monotonic()
        self.proc = procs.start(name, argv)
        port = self.proc.wait_line(r"infera-router listening on \S*:(\d+)", timeout=120).group(1)
        self.base = f"http://127.0.0.1:{port}"
        self.pid = self.proc.p.pid

    def metrics(self):
        status, body, _ = http("GET", self.base + "/metrics", timeout=60)
        if status != 200:
            raise AssertionError(f"/metrics answered {status}")
        return body

    def applied(self, body=None):
        body = body or self.metrics()
        return (scalar(body, "infera_kv_events_blocks_stored_total") +
                scalar(body, "infera_kv_events_blocks_removed_total"))

    def ready_ms(self, timeout):
        def ready():
            try:
                return http("GET", self.base + "/ready", timeout=5)[0] == 200
            except OSError:
                return False
        poll(ready, "router /ready 200", timeout=timeout, interval=0.005)
        return (time.monotonic() - self.t_start) * 1000


def prompt(rng, blocks=8):
    return [rng.randrange(1000, 30000) for _ in range(16 * blocks)]


def complete(base, tokens, request_id, timeout=30):
    body = json.dumps({"model": "mock-model", "prompt": tokens, "max_tokens": 1}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "X-Infera-Request-Id": request_id})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def pick_hits(router, request_id):
    line = router.proc.wait_line(rf"pick .*request_id={re.escape(request_id)} .*").group(0)
    return int(re.search(r"cache_hits=(\d+)", line).group(1))


def drain(router, shards, what, timeout):
    """Polls until the router applied every block published, or its counter stood
    still for 30 s (stores the view's bound refused under an evicted parent are never
    counted, doc/index.md "Bounded views"; 3 s was too short: at 4,096 targets under
    load the ingestion thread completed no batch for over 3 s, doc/perf-scale.md);
    returns (monotonic end s, applied)."""
    target = sum(s.published() for s in shards)
    last = [0.0, time.monotonic(), -1.0]  # applied, when it last moved, previous

    def done():
        last[0] = router.applied()
        now = time.monotonic()
        if last[0] != last[2]:
            last[1], last[2] = now, last[0]
        return last[0] >= target or now - last[1] >= 30
    poll(done, f"{what}: router applied {target} blocks (at {last[0]:.0f})", timeout=timeout,
         interval=0.05)
    if last[0] < target:
        print(f"{what}: the router applied {last[0]:.0f} of {target} blocks published "
              "(nothing moved for 30 s: the rest refused by the views' bound or lost)", flush=True)
        return last[1], last[0]
    return time.monotonic(), last[0]


def join_phase(procs, argv, snap_path, probe, result):
    """A second replica joins from the running router's snapshot (--join)."""
    argv = [snap_path + ".joiner" if a == snap_path else a for a in argv]
    joiner = Router(procs, argv + ["--kv-snapshot-peer-join"], "joiner")
    ms = joiner.ready_ms(timeout=300)
    m = joiner.proc.wait_line(r"kv-snapshot: (fetched (\d+) bytes from peer \S+ into \S+ in "
                              r"(\d+) ms|peer join failed: .*)", timeout=10)
    print(m.group(0), flush=True)
    check(complete(joiner.base, probe, "probe-join") == 200, "probe through the joiner")
    hits = pick_hits(joiner, "probe-join")
    body = joiner.metrics()
    result.update({
        "join_ready_ms": round(ms),
        "join_fetch_bytes": int(m.group(2) or 0), "join_fetch_ms": int(m.group(3) or 0),
        "join_restore_s": scalar(body, "infera_router_kv_snapshot_restore_seconds"),
        "join_restored_blocks": int(scalar(body, "infera_router_kv_snapshot_restored_blocks_total")),
        "join_verify": {r: labeled(body, "infera_router_kv_snapshot_verify_total", r)
                        for r in ("ok", "epoch", "gap", "empty", "failed")},
        "join_hits": hits,
        "join_view": int(family_sum(body, "infera_policy_cache_view_size"))})
    print(f"join: /ready {ms:.0f} ms after the joiner's start; fetched "
          f"{result['join_fetch_bytes']} bytes in {result['join_fetch_ms']} ms; restored "
          f"{result['join_restored_blocks']} blocks in {result['join_restore_s']:.2f} s; verify "
          f"{result['join_verify']}; first repeated prompt cache_hits={hits}; views "
          f"{result['join_view']} blocks", flush=True)
    joiner.proc.p.kill()
    joiner.proc.p.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--fleet", required=True)
    ap.add_argument("--workers", type=int, default=512)
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--view-blocks", type=int, default=2441, help="blocks each target holds")
    ap.add_argument("--batch-blocks", type=int, default=32, help="blocks stored per batch")
    ap.add_argument("--replay-batches", type=int, default=128,
                    help="each target's replay buffer (batches)")
    ap.add_argument("--rate", type=float, default=0, help="churn blocks/s (0: unpaced)")
    ap.add_argument("--fill-rate", type=float, default=0,
                    help="fill blocks/s (0: unpaced); below the router's rate, no backlog "
                         "queues in libzmq and the fill's RSS is the views' own")
    ap.add_argument("--churn-s", type=float, default=20)
    ap.add_argument("--quiet-picks", type=int, default=0,
                    help="requests sent one after another after the fill, before the churn")
    ap.add_argument("--poll-s", type=float, default=0.25, help="/metrics poll interval")
    ap.add_argument("--json", default=None)
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--router-arg", action="append", default=[],
                    help="one more router argument (repeat; --router-arg=--kv-ingest-threads "
                         "--router-arg=2)")
    ap.add_argument("--snapshot", action="store_true",
                    help="restart from a KV-view snapshot (--kv-snapshot-path)")
    ap.add_argument("--snapshot-interval-s", type=int, default=5)
    ap.add_argument("--join", action="store_true",
                    help="a second replica joins from the first's snapshot over NATS")
    args = ap.parse_args()
    args.snapshot = args.snapshot or args.join
    rng = random.Random(args.seed)
    targets = args.workers * args.dp
    shards_n = max(1, -(-targets // TARGETS_PER_SHARD))
    result = {"workers": args.workers, "dp": args.dp, "targets": targets,
              "view_blocks_per_target": args.view_blocks, "fleet_shards": shards_n}
    t_run = time.time()
    shards = []
    with Processes(log_dir=args.log_dir) as procs:
        try:
            # Ports: worker w's ranks at base + w*2*dp + r, replay + dp. A random base
            # below the ephemeral range (32768 on Linux); another try when something
            # holds a port of the range.
            span = args.workers * 2 * args.dp
            for attempt in range(8):
                base_port = rng.randrange(10000, max(10001, 32768 - span - 2 * args.dp))
                shards = [Shard([args.fleet, "--workers", str(args.workers), "--dp", str(args.dp),
                                 "--port-base", str(base_port), "--shard", str(i),
                                 "--shards", str(shards_n), "--view-blocks", str(args.view_blocks),
                                 "--batch-blocks", str(args.batch_blocks),
                                 "--replay-batches", str(args.replay_batches),
                                 "--seed", str(args.seed)],
                                os.path.join(procs.dir, f"fleet{i}.log"))
                          for i in range(shards_n)]
                try:
                    for s in shards:
                        s.wait("ready", timeout=120)
                    break
                except AssertionError:
                    for s in shards:
                        s.stop()
                    shards = []
            check(shards, "the fleet bound its ports")
            # The mock engine's ranks on fixed ports just past the fleet's range (below
            # the ephemeral range, where the router's thousands of connections and their
            # TIME_WAITs left OS-picked P + r ports taken after a big run).
            mock = base_port + span
            eproc = procs.start("engine", [
                args.engine, "--host", "127.0.0.1", "--port", "0", "--model-name", "mock-model",
                "--speedup", "1000", "--num-gpu-blocks", "65536", "--dp-size", str(args.dp),
                "--kv-events-endpoint", f"tcp://127.0.0.1:{mock}",
                "--kv-replay-endpoint", f"tcp://127.0.0.1:{mock + args.dp}"])
            line = eproc.wait_line(r"infera-mock-engine listening .*").group(0)
            engine = {"port": re.search(r"port=(\d+)", line).group(1),
                      "events": f"tcp://127.0.0.1:{mock}",
                      "replay": f"tcp://127.0.0.1:{mock + args.dp}"}
            url = f"http://127.0.0.1:{engine['port']}"
            records = [{"worker_id": f"127.0.0.1:{engine['port']}", "url": url,
                        "model_name": "mock-model", "kv_events_endpoint": engine["events"],
                        "kv_replay_endpoint": engine["replay"], "kv_block_size": 16,
                        "dp_size": args.dp}]
            for w in range(args.workers):
                p = base_port + w * 2 * args.dp
                records.append({"worker_id": f"sim-{w}", "url": url, "model_name": "mock-model",
                                "kv_events_endpoint": f"tcp://127.0.0.1:{p}",
                                "kv_replay_endpoint": f"tcp://127.0.0.1:{p + args.dp}",
                                "kv_block_size": 16, "dp_size": args.dp,
                                "num_gpu_blocks": args.view_blocks})
            workers_file = os.path.join(procs.dir, "workers.json")
            with open(workers_file, "w") as f:
                json.dump(records, f)
            argv = [args.router, "--host", "127.0.0.1", "--port", "0", "--log-level", "info",
                    "--kv-events-topic", "kv-events", "--workers-file", workers_file]
            argv += args.router_arg
            snap_path = os.path.join(procs.dir, "kv.snap")
            if args.snapshot:
                argv += ["--kv-snapshot-path", snap_path,
                         "--kv-snapshot-interval-s", str(args.snapshot_interval_s)]
            if args.join:
                nats_port = free_port()
                nats = procs.start("nats", ["nats-server", "-a", "127.0.0.1", "-p",
                                            str(nats_port)])
                nats.wait_line(r"Server is ready")
                argv += ["--router-replica-sync", "--nats-server", f"nats://127.0.0.1:{nats_port}"]
            router = Router(procs, argv, "router")
            ms = router.ready_ms(timeout=300)
            result["cold_ready_ms"] = round(ms)
            body = router.metrics()
            result["base_rss_mib"] = round(rss_kb(router.pid) / 1024, 1)
            result["base_huge_mib"] = round(huge_kb(router.pid) / 1024, 1)
            print(f"base: {targets} targets subscribed, ready in {ms:.0f} ms, "
                  f"RSS {result['base_rss_mib']} MiB", flush=True)

            # fill
            t0 = time.monotonic()
            a0 = router.applied()
            c0 = cpu_s(router.pid)
            fill_per_shard = args.fill_rate / len(shards) if args.fill_rate else 0
            for s in shards:
                s.send(f"fill {fill_per_shard}")
            for s in shards:
                s.wait("filled", timeout=3600)
            t_pub = time.monotonic() - t0
            t_end, a1 = drain(router, shards, "fill", timeout=3600)
            fill_cpu = cpu_s(router.pid) - c0
            body = router.metrics()
            view = family_sum(body, "infera_policy_cache_view_size")
            rss = rss_kb(router.pid) / 1024
            result.update({
                "fill_blocks": int(a1 - a0), "fill_publish_s": round(t_pub, 2),
                "fill_applied_s": round(t_end - t0, 2),
                "fill_blocks_per_s": round((a1 - a0) / (t_end - t0)),
                "fill_router_cpu_s": round(fill_cpu, 2),
                "fill_blocks_per_cpu_s": round((a1 - a0) / max(fill_cpu, 0.01)),
                "view_blocks": int(view), "filled_rss_mib": round(rss, 1),
                "filled_huge_mib": round(huge_kb(router.pid) / 1024, 1),
                "bytes_per_block": round((rss - result["base_rss_mib"]) * 2**20 / max(1, view), 1),
                "index_table_bytes_per_block":
                    round(scalar(body, "infera_kv_index_table_bytes") / max(1, view), 1)})
            print(f"fill: {int(a1 - a0)} blocks applied in {t_end - t0:.2f} s "
                  f"({result['fill_blocks_per_s']} blocks/s; router CPU {fill_cpu:.1f} s: "
                  f"{result['fill_blocks_per_cpu_s']} blocks per CPU s; the fleet published them in "
                  f"{t_pub:.2f} s); {int(view)} blocks in view; RSS {rss:.1f} MiB = base + "
                  f"{result['bytes_per_block']} B per (target, block), the index's tables "
                  f"{result['index_table_bytes_per_block']} B of it", flush=True)

            if args.quiet_picks:
                # Picks with the views full and no churn: the pick's own cost at this
                # fleet size (only the mock engine's own events are ingested meanwhile).
                hq0 = buckets(router.metrics(), "hash_match")
                qrng = random.Random(args.seed + 2)
                for i in range(args.quiet_picks):
                    complete(router.base, prompt(qrng), f"quiet-{i}")
                hq1 = buckets(router.metrics(), "hash_match")
                q50, qn = quantile_bound(hq0, hq1, 0.5)
                q99, _ = quantile_bound(hq0, hq1, 0.99)
                result.update({"quiet_pick_p50_le_us": q50 and q50 * 1e6,
                               "quiet_pick_p99_le_us": q99 and q99 * 1e6, "quiet_picks": qn})
                print(f"quiet picks: (hash_match) p50 <= {result['quiet_pick_p50_le_us']} us, "
                      f"p99 <= {result['quiet_pick_p99_le_us']} us over {qn} picks", flush=True)

            # churn, with a client sending requests and /metrics polled for the lag
            stop = threading.Event()
            lat = []

            def client():
                crng = random.Random(args.seed + 1)
                i = 0
                while not stop.is_set():
                    t = time.monotonic()
                    complete(router.base, prompt(crng), f"churn-{i}")
                    lat.append(time.monotonic() - t)
                    i += 1
            body0 = router.metrics()
            h0 = buckets(body0, "hash_match")
            t0, a0 = time.monotonic(), router.applied(body0)
            c0 = cpu_s(router.pid)
            c = threading.Thread(target=client, daemon=True)
            c.start()
            per_shard = args.rate / shards_n if args.rate else 0
            for s in shards:
                s.send(f"churn {args.churn_s} {per_shard}")
            lags, polls = [], []
            done = 0
            while done < len(shards):
                time.sleep(args.poll_s)
                body = router.metrics()
                tp = time.monotonic()
                applied = router.applied(body)
                polls.append((tp, applied))
                tpub = time_published(shards, applied)
                if tpub is not None:
                    lags.append(max(0.0, tp - tpub))
                with_lines = 0
                for s in shards:
                    with s.cv:
                        with_lines += any(line.startswith("churned") for line in s.lines)
                done = with_lines
            for s in shards:
                s.wait("churned", timeout=60)
            t_pub_end = time.monotonic()
            stop.set()
            c.join(timeout=60)
            body1 = router.metrics()
            h1 = buckets(body1, "hash_match")
            t_end, a1 = drain(router, shards, "churn", timeout=600)
            churn_cpu = cpu_s(router.pid) - c0
            body_end = router.metrics()
            published = sum(s.published() for s in shards) - result["fill_blocks"]
            p50, n = quantile_bound(h0, h1, 0.5)
            p99, _ = quantile_bound(h0, h1, 0.99)
            result.update({
                "churn_s": round(t_pub_end - t0, 2),
                "churn_published_blocks_per_s": round(published / (t_pub_end - t0)),
                "churn_applied_blocks_per_s": round((a1 - a0) / (t_end - t0)),
                "churn_router_cpu_s": round(churn_cpu, 2),
                "churn_blocks_per_cpu_s": round((a1 - a0) / max(churn_cpu, 0.01)),
                "churn_drain_s": round(t_end - t_pub_end, 2),
                "lag_p50_ms": round(1000 * percentile(lags, 0.5), 1) if lags else None,
                "lag_p99_ms": round(1000 * percentile(lags, 0.99), 1) if lags else None,
                "lag_samples": len(lags),
                "pick_p50_le_us": p50 and p50 * 1e6, "pick_p99_le_us": p99 and p99 * 1e6,
                "picks": n,
                "client_p50_ms": round(1000 * percentile(lat, 0.5), 2) if lat else None,
                "client_p99_ms": round(1000 * percentile(lat, 0.99), 2) if lat else None,
                "churn_rss_mib": round(rss_kb(router.pid) / 1024, 1),
                # What explains applied < published: the router's own counters.
                "router_counters": {k: int(scalar(body_end, "infera_kv_events_" + k + "_total"))
                                    for k in ("gaps", "replays", "replay_failures", "resyncs",
                                              "restarts", "dropped", "unknown_parents",
                                              "evicted_parents", "decode_errors")},
                "hwm_rss_mib": round(rss_kb(router.pid, "VmHWM") / 1024, 1)})
            print(f"churn: {result['churn_applied_blocks_per_s']} blocks/s applied over "
                  f"{t_end - t0:.1f} s (published {result['churn_published_blocks_per_s']}/s, "
                  f"drained {result['churn_drain_s']} s after); view lag p50 "
                  f"{result['lag_p50_ms']} ms p99 {result['lag_p99_ms']} ms ({len(lags)} polls); "
                  f"pick (hash_match) p50 <= {result['pick_p50_le_us']} us, p99 <= "
                  f"{result['pick_p99_le_us']} us over {n} picks; client p50 "
                  f"{result['client_p50_ms']} ms p99 {result['client_p99_ms']} ms", flush=True)

            # restart
            probe = prompt(rng)
            sent = [0]
            hits_seen = [0]

            def repeat_hits():
                # The engine's events reach the router a few ms after its answer.
                sent[0] += 1
                rid = f"probe-{sent[0]}"
                check(complete(router.base, probe, rid) == 200, "probe request")
                hits_seen[0] = pick_hits(router, rid)
                return hits_seen[0] > 0
            poll(repeat_hits, "the repeated prompt hits", timeout=20, interval=0.05)
            hits_before = hits_seen[0]
            view_before = family_sum(router.metrics(), "infera_policy_cache_view_size")
            if args.snapshot:
                w0 = labeled(router.metrics(), "infera_router_kv_snapshot_writes_total", "ok")
                poll(lambda: labeled(router.metrics(), "infera_router_kv_snapshot_writes_total",
                                     "ok") >= w0 + 2,
                     "a periodic snapshot that began after the probe",
                     timeout=120 + 4 * args.snapshot_interval_s, interval=0.2)
                body = router.metrics()
                result.update({
                    "snapshot_bytes": int(scalar(body, "infera_router_kv_snapshot_bytes")),
                    "snapshot_blocks": int(scalar(body, "infera_router_kv_snapshot_blocks")),
                    "snapshot_write_s": scalar(
                        body, "infera_router_kv_snapshot_last_write_duration_seconds")})
            if args.join:
                join_phase(procs, argv, snap_path, probe, result)
            router.proc.p.kill()
            router.proc.p.wait(timeout=30)
            router = Router(procs, argv, "router2")
            ms = router.ready_ms(timeout=300)
            check(complete(router.base, probe, "probe-after") == 200, "probe after the restart")
            hits_after = pick_hits(router, "probe-after")
            view_after = family_sum(router.metrics(), "infera_policy_cache_view_size")
            if args.snapshot:
                body = router.metrics()
                result.update({
                    "snapshot_restore_s": scalar(body, "infera_router_kv_snapshot_restore_seconds"),
                    "snapshot_restored_blocks": int(scalar(
                        body, "infera_router_kv_snapshot_restored_blocks_total")),
                    "snapshot_loaded": labeled(body, "infera_router_kv_snapshot_loads_total",
                                               "loaded"),
                    "snapshot_verify": {r: labeled(body, "infera_router_kv_snapshot_verify_total", r)
                                        for r in ("ok", "epoch", "gap", "empty", "failed")}})
                print(f"snapshot: {result['snapshot_bytes']} bytes, {result['snapshot_blocks']} "
                      f"blocks, written in {result['snapshot_write_s']:.2f} s; restored "
                      f"{result['snapshot_restored_blocks']} blocks in "
                      f"{result['snapshot_restore_s']:.2f} s; verify {result['snapshot_verify']}",
                      flush=True)
            result.update({"restart_ready_ms": round(ms), "hits_before": hits_before,
                           "hits_after_restart": hits_after, "view_before": int(view_before),
                           "view_after_ready": int(view_after),
                           "restart_rss_mib": round(rss_kb(router.pid) / 1024, 1),
                           "restart_hwm_mib": round(rss_kb(router.pid, "VmHWM") / 1024, 1)})
            print(f"restart: kill -9, /ready after {ms:.0f} ms; first repeated prompt "
                  f"cache_hits={hits_after} (before the kill {hits_before}); views "
                  f"{int(view_after)} blocks when ready (before the kill {int(view_before)})",
                  flush=True)
            result["load"] = open("/proc/loadavg").read().split()[:3]
            result["wall_s"] = round(time.time() - t_run, 1)
            print("result " + json.dumps(result), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(result, f, indent=1)
            if args.check:
                check(result["fill_blocks"] == targets * args.view_blocks,
                      f"every filled block applied ({result['fill_blocks']})")
                check(hits_after > 0, "the repeated prompt hits after kill -9 and restart")
                if args.snapshot:
                    check(result["snapshot_loaded"] == 1, "the snapshot was loaded")
                    v = result["snapshot_verify"]
                    check(v["ok"] == targets + args.dp and sum(v.values()) == v["ok"],
                          f"every restored view verified ok ({v})")
                if args.join:
                    check(result["join_fetch_bytes"] > 0, "the joiner fetched a peer's snapshot")
                    check(result["join_hits"] > 0, "the repeated prompt hits through the joiner")
                    v = result["join_verify"]
                    check(v["ok"] == targets + args.dp and sum(v.values()) == v["ok"],
                          f"every view the joiner restored verified ok ({v})")
        finally:
            for s in shards:
                s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
