#!/usr/bin/python3
"""Index soak (doc/soak.md): KV-event churn into the real infera-router, RSS sampled.

Real processes: etcd (Debian etcd-server), infera-router (--discovery-backend etcd),
one infera-register per worker (its record carries num_gpu_blocks, so the router
bounds each view at 1.25 x that unless --max-index-blocks is given). This script is
the fleet's engines: one ZMQ PUB socket per worker publishing vLLM-shaped KV-event
batches (the wire of tests/integration/events/peer_publisher.py) from a prefix-cache
model of `--num-gpu-blocks` blocks that evicts tail-first, as vLLM does, and loses
`--lose-fraction` of its BlockRemoved events on purpose (left out of the batch, the
sequence stays whole: the leak a lost removal makes). Every `--rotate-blocks` blocks
one worker leaves (its infera-register stops: etcd drops the record) and a new one
joins.

The router's RSS (/proc/PID/status VmRSS) is sampled every `--sample-blocks` applied
blocks into --csv; the summary compares the RSS after warm-up (the first sample at or
past --warmup-fraction of the run, when every view has reached its bound) with the
last one. With --check, asserts: every view within its bound at every sample, the
eviction counter moved, the router's stored-block counter saw the blocks, and the RSS
growth after warm-up within --max-growth: the median of the last quarter of the
samples after warm-up vs the median of the first quarter, so that one sample taken
while the allocator still holds a burst does not decide (no timing assertions).

Usage: index_soak.py --router R --register G [--blocks N] [--csv F] [--check]
"""
import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time

import msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "integration"))
import harness  # noqa: E402

BLOCK = 16
TOPIC = b"kv-events"


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metrics(base):
    status, body, _ = harness.http("GET", base + "/metrics")
    if status != 200:
        raise AssertionError(f"/metrics answered {status}")
    return body


def series(body, name):
    """{worker_id: value} of a per-worker family."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r"^" + re.escape(name) + r'\{worker_id="([^"]*)"\} (\S+)$', body, re.M)}


def scalar(body, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


class Worker:
    """One engine: a PUB socket and a prefix cache of conversations (block lists)."""

    def __init__(self, ctx, rng, name, capacity, lose):
        self.name, self.rng, self.capacity, self.lose = name, rng, capacity, lose
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.seq = 0
        self.next_hash = rng.randrange(1, 2**62)
        self.convs = []  # [engine hashes of the conversation's blocks], oldest first
        self.held = 0
        self.register = None
        self.stored = self.removed = self.lost = 0

    def publish(self, events):
        payload = msgpack.packb({"ts": time.time(), "events": events, "data_parallel_rank": 0},
                                use_bin_type=True)
        self.sock.send_multipart([TOPIC, self.seq.to_bytes(8, "big"), payload])
        self.seq += 1

    def hashes(self, n):
        h = list(range(self.next_hash, self.next_hash + n))
        self.next_hash += n
        return h

    def step(self, conv_id):
        """One batch: a few requests (new conversations or continuations) and the
        evictions they force. Returns the blocks stored."""
        events, stored = [], 0
        for _ in range(4):
            if self.convs and self.rng.random() < 0.6:
                conv = self.rng.choice(self.convs)
                n = self.rng.randrange(1, 8)
                parent = conv[-1]
                tokens = [7] * (n * BLOCK)
            else:
                conv = []
                self.convs.append(conv)
                n = self.rng.randrange(4, 32)
                parent = None
                # A fresh root: the first block's tokens are unique to the conversation.
                tokens = [conv_id & 0xFFFFFF, (conv_id >> 24) & 0xFFFFFF] + [3] * (n * BLOCK - 2)
                conv_id += 1
            h = self.hashes(n)
            conv.extend(h)
            events.append({"type": "BlockStored", "block_hashes": h, "parent_block_hash": parent,
                           "token_ids": tokens, "block_size": BLOCK, "lora_id": None,
                           "medium": "GPU", "lora_name": None})
            self.held += n
            stored += n
        while self.held > self.capacity:
            # Tail-first eviction of the least recently extended conversation.
            conv = self.convs[0]
            n = min(len(conv), self.rng.randrange(1, 16), self.held - self.capacity + 8)
            gone = conv[-n:]
            del conv[-n:]
            if not conv:
                self.convs.pop(0)
            self.held -= n
            self.removed += n
            if self.rng.random() < self.lose:
                self.lost += n  # left out of the batch: the router never hears of it
                continue
            events.append({"type": "BlockRemoved", "block_hashes": gone, "medium": "GPU"})
        self.publish(events)
        self.stored += stored
        return stored, conv_id


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    ap.add_argument("--register", required=True)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--num-gpu-blocks", type=int, default=20000)
    ap.add_argument("--max-index-blocks", default=None,
                    help="router flag (default: the router's, from num_gpu_blocks)")
    ap.add_argument("--blocks", type=int, default=12_000_000, help="blocks to store in all")
    ap.add_argument("--lose-fraction", type=float, default=0.05)
    ap.add_argument("--rotate-blocks", type=int, default=1_000_000)
    ap.add_argument("--sample-blocks", type=int, default=200_000)
    ap.add_argument("--warmup-fraction", type=float, default=0.25)
    ap.add_argument("--max-growth", type=float, default=0.10)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trace-batches", type=int, default=0,
                    help="every N batches, print RSS and the backlog (published - applied)")
    ap.add_argument("--log-dir", default=None,
                    help="keep every child's log here (e.g. the router's MIMALLOC_SHOW_STATS=1 "
                         "report at exit); default: a temporary directory, removed")
    ap.add_argument("--max-backlog-blocks", type=int, default=0,
                    help="pace the publishers: every 100 batches, wait while more than this "
                         "many published blocks are not yet applied (0: unpaced)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    ctx = zmq.Context()
    t_start = time.time()
    with harness.Processes(log_dir=args.log_dir) as procs:
        cport, pport = harness.free_port(), harness.free_port()
        harness.start_etcd(procs, "etcd", os.path.join(procs.dir, "etcd"), cport, pport)
        etcd = f"127.0.0.1:{cport}"
        argv = [args.router, "--host", "127.0.0.1", "--port", "0", "--log-level", "info",
                "--discovery-backend", "etcd", "--etcd-endpoint", etcd,
                "--kv-events-topic", TOPIC.decode()]
        if args.max_index_blocks is not None:
            argv += ["--max-index-blocks", str(args.max_index_blocks)]
        router = procs.start("router", argv)
        port = router.wait_line(r"infera-router listening on \S*:(\d+)").group(1)
        base = f"http://127.0.0.1:{port}"
        pid = router.p.pid
        serial = [0]
        published = [0]  # blocks published by every worker, probes included
        probes = [0]  # of which probes (those before the router subscribed are lost)

        lost_joins = []  # names of workers the router never followed (doc/soak.md)

        def join():
            """A new worker, followed by the router within 30 s; a join it does not
            follow fails the soak, with the router's counters printed (doc/soak.md:
            lost joins were the ZMQ I/O thread blocked on a closed monitor, fixed)."""
            w = start_worker()
            if follows(w):
                return w
            body = metrics(base)
            print(f"lost join: {w.name} at {w.endpoint}, {w.seq} probe batches published; "
                  "router: " + ", ".join(
                      m.group(0) for m in re.finditer(
                          r"^infera_kv_events_\w+_total \S+$", body, re.M)), flush=True)
            lost_joins.append(w.name)
            raise AssertionError(f"the router did not follow {w.name} within 30 s")

        def start_worker():
            serial[0] += 1
            w = Worker(ctx, random.Random(rng.random()), f"soak-w{serial[0]}",
                       args.num_gpu_blocks, args.lose_fraction)
            record = {"worker_id": w.name, "url": "http://127.0.0.1:9", "model_name": "soak",
                      "kv_events_endpoint": w.endpoint, "kv_block_size": BLOCK,
                      "num_gpu_blocks": args.num_gpu_blocks}
            w.register = procs.start(w.name + "-register", [
                args.register, "--etcd-endpoint", etcd, "--lease-ttl-s", "5", "--keepalive-s", "1",
                "--record-json", json.dumps(record)])
            return w

        def follows(w):
            # Subscribed once the router's view answers the worker's first blocks:
            # one probe published, polled, republished (new seq) every 50 polls.
            polls = [0]

            def seen():
                if polls[0] % 50 == 0:
                    n = w.step(2**40 + serial[0] * 2**20 + polls[0])[0]
                    published[0] += n
                    probes[0] += n
                polls[0] += 1
                return series(metrics(base), "infera_policy_cache_view_size").get(w.name, 0) > 0
            try:
                harness.poll(seen, f"router follows {w.name}", timeout=30, interval=0.02)
                return True
            except AssertionError:
                return False

        def leave(w):
            w.register.p.terminate()
            w.register.p.wait(timeout=30)
            w.sock.close(linger=0)
            harness.poll(lambda: w.name not in series(metrics(base),
                                                      "infera_policy_cache_view_size"),
                         f"router drops {w.name}", timeout=60, interval=0.05)

        workers = [join() for _ in range(args.workers)]
        rows = []
        stored = 0
        conv_id = 1
        next_sample = 0
        next_rotate = args.rotate_blocks
        joins = leaves = 0
        batches = 0
        violations = []
        while True:
            if stored >= next_sample or stored >= args.blocks:
                # Let the router catch up with what was published before sampling:
                # until its stored-block counter stops moving (stores under an
                # evicted parent are skipped, never counted), at most 30 s.
                deadline = time.time() + 30
                previous = -1.0
                while True:
                    body = metrics(base)
                    applied = scalar(body, "infera_kv_events_blocks_stored_total")
                    if applied == previous or time.time() > deadline:
                        break
                    previous = applied
                    time.sleep(0.1)
                views = series(body, "infera_policy_cache_view_size")
                bounds = series(body, "infera_router_index_max_blocks")
                evicted = sum(series(body, "infera_router_index_blocks_evicted_total").values())
                for wid, v in views.items():
                    if bounds.get(wid, 0) > 0 and v > bounds[wid]:
                        violations.append((wid, v, bounds[wid]))
                rows.append({"t_s": round(time.time() - t_start, 2), "published_blocks": stored,
                             "applied_blocks": int(applied), "rss_kb": rss_kb(pid),
                             "view_blocks": int(sum(views.values())),
                             "max_view_blocks": int(max(views.values(), default=0)),
                             "bound_blocks": int(max(bounds.values(), default=0)),
                             "evicted_blocks": int(evicted), "workers": len(views)})
                print("sample", json.dumps(rows[-1]), flush=True)
                next_sample += args.sample_blocks
                if stored >= args.blocks:
                    break
            if stored >= next_rotate:
                gone = workers.pop(rng.randrange(len(workers)))
                leave(gone)
                leaves += 1
                workers.append(join())
                joins += 1
                next_rotate += args.rotate_blocks
            batches += 1
            if args.trace_batches and batches % args.trace_batches == 0:
                applied_now = scalar(metrics(base), "infera_kv_events_blocks_stored_total")
                print("trace", json.dumps({"t_s": round(time.time() - t_start, 2),
                                           "published_blocks": published[0],
                                           "backlog_blocks": int(published[0] - applied_now),
                                           "rss_kb": rss_kb(pid)}), flush=True)
            if args.max_backlog_blocks and batches % 100 == 0:
                # Paced: an engine publishes as fast as its GPU fills blocks, not as
                # fast as a Python loop can; let the router catch up to half the cap
                # (or until its counter stops moving: skipped stores never count).
                applied_now, still = -1.0, 0
                while True:
                    moved = scalar(metrics(base), "infera_kv_events_blocks_stored_total")
                    if published[0] - moved <= args.max_backlog_blocks // 2:
                        break
                    still = still + 1 if moved == applied_now else 0
                    if still >= 5:
                        break
                    applied_now = moved
                    time.sleep(0.02)
            w = workers[rng.randrange(len(workers))]
            n, conv_id = w.step(conv_id)
            stored += n
            published[0] += n
        # Every block published reached the router (bounded poll, no sleeps).
        wall = time.time() - t_start
        warm = next(r for r in rows if r["published_blocks"] >= args.warmup_fraction * args.blocks)
        end = rows[-1]
        growth = (end["rss_kb"] - warm["rss_kb"]) / warm["rss_kb"]
        # Flatness, robust to one sample's allocator state: the median of the last
        # quarter of the samples after warm-up vs the median of the first quarter.
        after = [r["rss_kb"] for r in rows[rows.index(warm):]]
        quarter = max(1, len(after) // 4)
        first_q, last_q = statistics.median(after[:quarter]), statistics.median(after[-quarter:])
        drift = (last_q - first_q) / first_q
        lost = sum(w.lost for w in workers)
        if args.csv:
            with open(args.csv, "w") as f:
                keys = list(rows[0].keys())
                f.write(",".join(keys) + "\n")
                for r in rows:
                    f.write(",".join(str(r[k]) for k in keys) + "\n")
        print(f"summary: {end['applied_blocks']} blocks applied by the router "
              f"({stored} published) in {wall:.0f} s, {args.workers} workers, "
              f"{joins} joins + {leaves} leaves, {args.lose_fraction:.0%} of removals lost "
              f"({lost} blocks by the workers still running), "
              f"{end['evicted_blocks']} blocks evicted (live workers); "
              f"RSS after warm-up {warm['rss_kb'] / 1024:.1f} MiB "
              f"(at {warm['published_blocks']} blocks) vs at the end "
              f"{end['rss_kb'] / 1024:.1f} MiB: {growth:+.1%}; after warm-up min / median / max "
              f"{min(after) / 1024:.1f} / {statistics.median(after) / 1024:.1f} / "
              f"{max(after) / 1024:.1f} MiB ({len(after)} samples), last quarter vs first "
              f"quarter (medians) {drift:+.1%}; "
              f"largest view {max(r['max_view_blocks'] for r in rows)} blocks "
              f"(bound {end['bound_blocks']}); joins not followed: {len(lost_joins)} "
              f"{lost_joins}", flush=True)
        if args.check:
            harness.check(not violations, f"every view within its bound at every sample "
                          f"({violations[:3]})")
            harness.check(end["evicted_blocks"] > 0, "the bound evicted blocks")
            harness.check(end["applied_blocks"] >= 0.9 * stored,
                          f"the router applied the stored blocks ({end['applied_blocks']})")
            harness.check(drift <= args.max_growth,
                          f"RSS growth after warm-up (last quarter vs first quarter of the "
                          f"samples, medians) {drift:+.1%} <= {args.max_growth:.0%}")
    ctx.destroy(linger=0)  # sockets of workers still running: closed here
    return 0


if __name__ == "__main__":
    sys.exit(main())
