#!/usr/bin/python3
"""Health that means something (issue 22 items 7 and 8, doc/router.md "Health and
readiness"): the real infera-router and real infera-mock-engines.

Usage: health_test.py BUILD_DIR CASE, CASE one of

  join    Default flags, etcd discovery (a real etcd). While two threads poll /ready and
          /health as fast as they can, a third engine's record joins, then a record with
          dp_size 4096 (4096 targets whose replay sockets never answer), then both
          leave. Neither endpoint may answer anything but 200, or fail to answer.
  frozen  Default flags, static discovery, two engines. A steady stream of requests
          (4 clients) before, during and after one engine is SIGSTOPped for 25 s: the
          health checks must take it out of picks (detection time printed), the
          requests waiting on it must fail over, >= 95 % of the requests started 20 s
          into the freeze must succeed (the share of every phase is printed), and
          SIGCONT must bring it back into picks.
  checks  The same machinery in seconds, for the ASan+UBSan smoke: fast health checks
          (--health-check-interval-ms 100) against a SIGSTOPped engine (its waiting
          requests fail over, SIGCONT brings it back); --first-byte-timeout-ms against a
          hostile worker written here (its /health answers, its completions never do):
          streams fail over, and Infera's breaker flags (--breaker-failure-threshold,
          --breaker-cooldown-s, --breaker-max-cooldown-s, --request-max-retries) give
          Infera's doubling cooldowns in the log; two names of one setting are refused.

Waits are bounded polls; no fixed sleeps.
"""
from http import server as http_server
import json
import os
import re
import signal
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, binaries, check, fail, free_port, http, poll,  # noqa: E402
                     start_engine, start_etcd, start_router, worker_flag)

MODEL = "mock-model"


def post(base, body, timeout=60, stream=False):
    """(status, worker id, seconds) of one /v1/completions request; status 0 when the
    connection failed or timed out."""
    if stream:
        body = dict(body, stream=True)
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, r.headers.get("X-Infera-Worker-Id", ""), time.time() - t0
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, e.headers.get("X-Infera-Worker-Id", ""), time.time() - t0
    except OSError:
        return 0, "", time.time() - t0


def workers(base):
    return {w["worker_id"]: w for w in json.loads(http("GET", base + "/v1/workers")[1])["workers"]}


def metric_sum(base, pattern):
    """The sum of every /metrics sample whose line matches `pattern` (a regex)."""
    body = http("GET", base + "/metrics")[1]
    return sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
               if not l.startswith("#") and re.search(pattern, l))


class Poller(threading.Thread):
    """GETs `url` back to back until stopped; counts answers by status, failures and
    the slowest answer."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.stop, self.statuses, self.errors, self.slowest = url, False, {}, [], 0.0

    def run(self):
        while not self.stop:
            t0 = time.time()
            try:
                status = http("GET", self.url, timeout=5)[0]
                self.statuses[status] = self.statuses.get(status, 0) + 1
            except OSError as e:
                self.errors.append(repr(e))
            self.slowest = max(self.slowest, time.time() - t0)

    def finish(self):
        self.stop = True
        self.join(10)
        return self


def etcdctl(cport, *args):
    out = subprocess.run(["etcdctl", "--endpoints", f"127.0.0.1:{cport}", *args],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        fail(f"etcdctl {' '.join(args[:2])}: {out.stderr}")


def record(fields, **extra):
    wid = f"127.0.0.1:{fields['port']}"
    return {"worker_id": wid, "url": f"http://{wid}", "model_name": MODEL, "engine": "mock",
            "kv_events_endpoint": fields["events"], "kv_replay_endpoint": fields["replay"],
            "kv_block_size": 16, **extra}


def case_join(build):
    _, engine_bin, router_bin = binaries(build)
    with Processes() as procs:
        cport, pport = free_port(), free_port()
        start_etcd(procs, "etcd", os.path.join(procs.dir, "etcd"), cport, pport)
        engines = [start_engine(procs, engine_bin, f"engine{i}")[1] for i in range(3)]
        for f in engines[:2]:
            r = record(f)
            etcdctl(cport, "put", "/infera/workers/" + r["worker_id"], json.dumps(r))
        router = procs.start("router", [router_bin, "--host", "127.0.0.1", "--port", "0",
                                        "--kv-events-topic", "kv-events",
                                        "--discovery-backend", "etcd",
                                        "--etcd-endpoint", f"127.0.0.1:{cport}"])
        base = "http://127.0.0.1:" + router.wait_line(r"listening on \S*:(\d+)").group(1)
        poll(lambda: http("GET", base + "/ready")[0] == 200, "router ready with 2 workers")
        pollers = [Poller(base + "/ready"), Poller(base + "/health")]
        for p in pollers:
            p.start()

        def count(n):
            return lambda: json.loads(http("GET", base + "/ready")[1])["workers"] == n

        def replays():
            return metric_sum(base, r"^infera_kv_events_replays_total ")

        # A normal record joins: its replay runs while both endpoints are polled.
        before = replays()
        third = record(engines[2])
        etcdctl(cport, "put", "/infera/workers/" + third["worker_id"], json.dumps(third))
        poll(count(3), "the third engine joined")
        poll(lambda: replays() > before, "its replay was requested")
        poll(lambda: workers(base)[third["worker_id"]]["health_check"]["checks"] >= 1,
             "and its first health check ran")
        # A record with 4096 DP ranks: 4096 targets, 4096 replays that never answer.
        big_port = 20000
        big = {"worker_id": "dp4096", "url": f"http://127.0.0.1:{free_port()}",
               "model_name": MODEL, "engine": "mock",
               "kv_events_endpoint": f"tcp://127.0.0.1:{big_port}",
               "kv_replay_endpoint": f"tcp://127.0.0.1:{big_port + 5000}",
               "kv_block_size": 16, "dp_size": 4096}
        t0 = time.time()
        etcdctl(cport, "put", "/infera/workers/dp4096", json.dumps(big))
        poll(count(4), "the dp_size 4096 record joined", timeout=60)
        joined_s = time.time() - t0
        before = replays()
        poll(lambda: replays() >= before + 4, "its ranks' replays run (and time out)", timeout=60)
        # Leaves: both records go.
        etcdctl(cport, "del", "/infera/workers/dp4096")
        etcdctl(cport, "del", "/infera/workers/" + third["worker_id"])
        poll(count(2), "both left", timeout=60)
        ready = json.loads(http("GET", base + "/ready")[1])
        for p in pollers:
            p.finish()
        for p in pollers:
            print(f"{p.url}: {p.statuses} errors={len(p.errors)} slowest={p.slowest * 1000:.0f} ms",
                  flush=True)
            check(set(p.statuses) == {200} and not p.errors,
                  f"{p.url} answered 200 every time ({sum(p.statuses.values())} polls) across "
                  f"a join, a dp_size 4096 join ({joined_s:.1f} s to list) and two leaves")
        check(ready["routable_workers"] == 2 and ready["startup_replay_done"],
              f"/ready after the leaves: {ready}")


def case_frozen(build):
    _, engine_bin, router_bin = binaries(build)
    with Processes() as procs:
        started = [start_engine(procs, engine_bin, f"engine{i}") for i in range(2)]
        flags = [worker_flag(f) for _, f in started]
        victim, victim_id = started[0][0], f"127.0.0.1:{started[0][1]['port']}"
        _, base = start_router(procs, router_bin, flags)

        results = []  # (start time, status, worker, seconds)
        lock = threading.Lock()
        stop = threading.Event()

        def client(n):
            i = 0
            while not stop.is_set():
                i += 1
                # Distinct prompts (a few blocks each): both engines get picks.
                prompt = [n * 1_000_000 + i * 1000 + t for t in range(64)]
                t0 = time.time()
                status, worker, secs = post(base, {"model": MODEL, "prompt": prompt,
                                                   "max_tokens": 4}, timeout=60,
                                            stream=(i % 2 == 0))
                with lock:
                    results.append((t0, status, worker, secs))

        threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(4)]
        for t in threads:
            t.start()
        poll(lambda: len([r for r in results if r[2] == victim_id]) >= 5,
             "both engines serve before the freeze", timeout=30)
        n_before = len(results)
        poll(lambda: len(results) >= n_before + 40, "a steady stream before the freeze")
        t_stop = time.time()
        victim.p.send_signal(signal.SIGSTOP)
        poll(lambda: workers(base)[victim_id]["health"] == "unhealthy",
             "the frozen engine is detected", timeout=30, interval=0.1)
        detected_s = time.time() - t_stop
        # The freeze lasts 25 s; the stream goes on.
        poll(lambda: time.time() >= t_stop + 25 and
             len([r for r in list(results) if r[0] >= t_stop + 20]) >= 10,
             "25 s of freeze, with requests started after the 20th second", timeout=60)
        t_cont = time.time()
        victim.p.send_signal(signal.SIGCONT)
        poll(lambda: workers(base)[victim_id]["health"] == "healthy",
             "SIGCONT: healthy again", timeout=30, interval=0.1)
        back_s = time.time() - t_cont
        poll(lambda: any(r[2] == victim_id and r[0] > t_cont + back_s for r in list(results)),
             "and back in picks", timeout=30)
        stop.set()
        for t in threads:
            t.join(70)

        def share(lo, hi):
            rs = [r for r in results if lo <= r[0] < hi]
            ok = [r for r in rs if r[1] == 200]
            return len(ok), len(rs), max((r[3] for r in rs), default=0)

        phases = [("before", 0, t_stop), ("freeze, first 20 s", t_stop, t_stop + 20),
                  ("freeze, after 20 s", t_stop + 20, t_cont), ("after SIGCONT", t_cont, 1e12)]
        for name, lo, hi in phases:
            ok, n, slowest = share(lo, hi)
            print(f"{name}: {ok}/{n} succeeded ({100.0 * ok / max(n, 1):.1f} %), "
                  f"slowest {slowest:.1f} s", flush=True)
        m = metric_sum(base, r'^infera_router_upstream_errors_total\{.*kind="unhealthy"')
        print(f"detection {detected_s:.1f} s after SIGSTOP; back {back_s:.1f} s after SIGCONT; "
              f"{m:.0f} waiting requests failed over", flush=True)
        check(detected_s <= 15, f"frozen engine detected within 15 s ({detected_s:.1f} s)")
        ok, n, _ = share(t_stop + 20, t_cont)
        check(n >= 10 and ok >= 0.95 * n,
              f">= 95 % of the requests started 20 s into the freeze succeed ({ok}/{n})")
        ok, n, _ = share(t_stop, t_cont)
        check(ok >= 0.95 * n, f">= 95 % of every request started during the freeze ({ok}/{n})")


class HostileWorker(http_server.BaseHTTPRequestHandler):
    """Answers GET /health; takes completions and never answers them."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        body = b'{"status":"ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.held += 1
        self.connection.settimeout(None)
        while self.connection.recv(65536):  # until the router closes it
            pass
        self.close_connection = True

    def log_message(self, *args):
        pass


class HostileServer(socketserver.ThreadingMixIn, http_server.HTTPServer):
    daemon_threads = True
    held = 0


def case_checks(build):
    _, engine_bin, router_bin = binaries(build)
    with Processes() as procs:
        # 1. A SIGSTOPped engine under fast health checks (300 ms: the requests sent at
        #    once wait on it before the third failed probe fails them over).
        started = [start_engine(procs, engine_bin, f"engine{i}") for i in range(2)]
        victim, victim_id = started[0][0], f"127.0.0.1:{started[0][1]['port']}"
        _, base = start_router(procs, router_bin, [worker_flag(f) for _, f in started],
                               "--router-policy", "round-robin",
                               "--health-check-interval-ms", "300",
                               "--health-check-timeout-ms", "300")
        victim.p.send_signal(signal.SIGSTOP)
        results = []
        threads = [threading.Thread(target=lambda i=i: results.append(
            post(base, {"model": MODEL, "prompt": list(range(i, i + 40)), "max_tokens": 2},
                 stream=bool(i % 2))), daemon=True) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        check(len(results) == 6 and all(r[0] == 200 for r in results),
              f"6 requests during the freeze all succeed: {[(r[0], r[1]) for r in results]}")
        check(workers(base)[victim_id]["health"] == "unhealthy", "the frozen engine is unhealthy")
        check(all(r[1] != victim_id for r in results), "no answer came from the frozen engine")
        m = metric_sum(base, r'^infera_router_upstream_errors_total\{.*kind="unhealthy"')
        check(m >= 1, f"{m:.0f} requests waiting on the frozen engine failed over")
        victim.p.send_signal(signal.SIGCONT)
        poll(lambda: workers(base)[victim_id]["health"] == "healthy", "SIGCONT: healthy again")
        poll(lambda: post(base, {"model": MODEL, "prompt": [7] * 40, "max_tokens": 2})[1]
             == victim_id, "and back in picks")
        status, body, _ = http("GET", base + "/health")
        check(status == 200 and json.loads(body) == {"status": "ok", "active_workers": 2},
              f"/health: Infera's shape, both routable: {body}")

        # 2. A worker whose health passes and whose completions never answer: the
        #    first-byte timeout, with Infera's breaker flags.
        hostile = HostileServer(("127.0.0.1", 0), HostileWorker)
        threading.Thread(target=hostile.serve_forever, daemon=True).start()
        hid = f"127.0.0.1:{hostile.server_address[1]}"
        good = started[1][1]
        argv = ["--router-policy", "round-robin", "--first-byte-timeout-ms", "300",
                "--breaker-failure-threshold", "1", "--breaker-cooldown-s", "0.2",
                "--breaker-max-cooldown-s", "0.5", "--request-max-retries", "1"]
        proc, base2 = start_router(procs, router_bin,
                                   [f"http://{hid},worker_id={hid},model_name={MODEL}",
                                    worker_flag(good)], *argv, name="router2")
        served, opened = [], []
        deadline = time.time() + 60
        while time.time() < deadline and len(opened) < 4:
            served.append(post(base2, {"model": MODEL, "prompt": list(range(40)),
                                       "max_tokens": 2}, stream=True))
            opened = proc.grep(r"breaker: worker " + re.escape(hid) + r" open for")
        check(all(r[0] == 200 for r in served),
              f"{len(served)} streams all answered (each timed-out attempt failed over)")
        cooldowns = [float(re.search(r"open for ([\d.]+) s", l).group(1)) for l in opened[:4]]
        check(cooldowns == [0.2, 0.4, 0.5, 0.5],
              f"Infera's breaker: each failed probe doubles the cooldown up to the max: "
              f"{cooldowns}")
        check(hostile.held >= 4, f"the hostile worker got {hostile.held} attempts")
        m = metric_sum(base2, r'kind="first_byte_timeout"')
        check(m >= 4, f"upstream_errors{{kind=first_byte_timeout}} = {m:.0f}")
        # --request-max-retries 0: one attempt only; the stream's 502 names the timeout.
        proc3, base3 = start_router(procs, router_bin,
                                    [f"http://{hid},worker_id={hid},model_name={MODEL}"],
                                    "--first-byte-timeout-ms", "300", "--request-max-retries",
                                    "0", name="router3")
        status, _, _ = post(base3, {"model": MODEL, "prompt": [1] * 20}, stream=True)
        check(status == 502, f"a lone hostile worker: 502 after the first-byte timeout ({status})")
        hostile.shutdown()
        conflicts = [("--request-max-retries", "--max-attempts"),
                     ("--breaker-failure-threshold", "--breaker-failures"),
                     ("--breaker-cooldown-s", "--breaker-cooldown-ms"),
                     ("--breaker-max-cooldown-s", "--breaker-max-cooldown-ms")]
        # Under the sanitizers (make test's smoke) one refusal stands for all: each
        # start of the ASan binary costs ~2.5 s, and they share one parsing path.
        if os.environ.get("INFERA_SANITIZED"):
            conflicts = conflicts[:1]
        for a, b in conflicts:
            rc, out = procs.run("conflict", [router_bin, a, "1", b, "1"], timeout=30)
            check(rc != 0 and "excludes" in out, f"{a} with {b} is refused: {out.splitlines()[0]}")
        if not os.environ.get("INFERA_SANITIZED"):
            rc, out = procs.run("bad-path", [router_bin, "--health-check-path", "health"],
                                timeout=30)
            check(rc != 0 and "must start with /" in out,
                  "a health-check path without / is refused")


def main():
    build, case = sys.argv[1], sys.argv[2]
    {"join": case_join, "frozen": case_frozen, "checks": case_checks}[case](build)


if __name__ == "__main__":
    main()
