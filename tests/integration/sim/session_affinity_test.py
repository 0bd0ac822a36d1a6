#!/usr/bin/python3
"""--session-affinity through the real infera-router and real mock engines registered
in a real etcd (doc/session-affinity.md). Usage: session_affinity_test.py BUILD_DIR

1. Mixed fleet (three engines, --session-affinity prefill, --breaker-failures 1):
   nine sessions (body session_id, prompt_cache_key or the X-Session-Id header), three
   turns each with new text: every turn goes to the session's first worker (pick log
   `session=hit`). A worker that leaves discovery (SIGTERM: its lease is revoked):
   its sessions go elsewhere (`session=rebound`) and stay there. A worker killed
   without leaving (SIGKILL: still listed): its first session's request fails over
   and is rebound; the breaker opens, so its other sessions are replaced without a
   failover; then they stay.
2. PD fleet (two prefill and two decode engines, sglang-bootstrap,
   --session-affinity both): each session keeps its prefill and its decode worker;
   when its decode worker leaves, only the decode leg is rebound (the prefill pick
   is still a hit), and the new pair holds.
Waits are bounded polls; no fixed sleeps.
"""
import json
import os
import re
import signal
import sys
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, binaries, check, free_port, http, poll, start_engine, start_etcd  # noqa: E402

BUILD = sys.argv[1]
_, ENGINE, ROUTER = binaries(BUILD)


def fleet(procs, etcd_port, roles):
    """Engines registering themselves in etcd, one per role; (Proc, worker_id) each."""
    out = []
    for i, role in enumerate(roles):
        extra = [] if role == "mixed" else ["--role", role, "--pd-protocol", "sglang-bootstrap"]
        proc, f = start_engine(procs, ENGINE, f"{role}{i}", "--num-gpu-blocks", "1024",
                               "--speedup", "50", "--etcd-endpoint", f"127.0.0.1:{etcd_port}",
                               *extra)
        out.append((proc, f"127.0.0.1:{f['port']}"))
    return out


def router(procs, etcd_port, n_workers, *extra):
    proc = procs.start("router", [ROUTER, "--host", "127.0.0.1", "--port", "0",
                                  "--kv-events-topic", "kv-events", "--discovery-backend", "etcd",
                                  "--etcd-endpoint", f"127.0.0.1:{etcd_port}", *extra])
    base = "http://127.0.0.1:" + proc.wait_line(r"infera-router listening on \S*:(\d+)").group(1)
    poll(lambda: len(listed(base)) == n_workers, f"the router lists its {n_workers} workers")
    return proc, base


def listed(base):
    status, body, _ = http("GET", base + "/v1/workers")
    return {w["worker_id"] for w in json.loads(body)["workers"]} if status == 200 else set()


class Client:
    """Chats through the router, each with its own X-Infera-Request-Id so the pick log
    lines of a request can be found."""

    def __init__(self, base, router_proc):
        self.base, self.router, self.sent = base, router_proc, 0

    def chat(self, session, source, text):
        body = {"model": "mock-model", "max_tokens": 2,
                "messages": [{"role": "user", "content": text}]}
        headers = {"Content-Type": "application/json"}
        if source == "header":
            headers["X-Session-Id"] = session
        else:
            body[source] = session
        self.sent += 1
        rid = f"sess-{self.sent}"
        headers["X-Infera-Request-Id"] = rid
        req = urllib.request.Request(self.base + "/v1/chat/completions",
                                     data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            check(r.status == 200, f"{session}: {rid} answered 200")
            return r.headers["X-Infera-Worker-Id"], rid

    def picks(self, rid):
        """{role: (picked, session field)} of the request's pick lines."""
        out = {}
        for line in self.router.grep(r"pick policy=\S+ role=\S+ request_id=%s " % re.escape(rid)):
            m = re.search(r"role=(\S+) .*picked=(\S+) .*?(?: session=(\S+))?$", line)
            out[m.group(1)] = (m.group(2), m.group(3))
        return out


def metric(base, name):
    _, text, _ = http("GET", base + "/metrics")
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def failovers(base):
    _, text, _ = http("GET", base + "/metrics")
    return sum(float(v) for v in re.findall(r"^infera_router_failovers_total\{.*\} (\S+)$", text,
                                            re.M))


def etcd(procs):
    cport, pport = free_port(), free_port()
    start_etcd(procs, "etcd", os.path.join(procs.dir, "etcd"), cport, pport)
    return cport


SOURCES = ["session_id", "prompt_cache_key", "header"]


def test_mixed():
    with Processes() as procs:
        etcd_port = etcd(procs)
        engines = fleet(procs, etcd_port, ["mixed"] * 3)
        rproc, base = router(procs, etcd_port, 3, "--session-affinity", "prefill",
                             "--breaker-failures", "1", "--breaker-cooldown-ms", "60000")
        client = Client(base, rproc)
        sessions = {f"mixed-s{i}": SOURCES[i % 3] for i in range(9)}
        home = {}
        for turn in range(3):
            for s, source in sessions.items():
                w, rid = client.chat(s, source, f"{s} turn {turn}: where is shipment {turn}?")
                if turn == 0:
                    home[s] = w
                    check(client.picks(rid)["mixed"] == (w, "new"), f"{s}: bound to {w}")
                else:
                    check(w == home[s] and client.picks(rid)["mixed"] == (w, "hit"),
                          f"{s} turn {turn} stays on {home[s]} (got {w})")
        by_worker = {}
        for s, w in home.items():
            by_worker.setdefault(w, []).append(s)
        check(len(by_worker) == 3, f"the sessions spread over the three workers {by_worker}")

        # A worker leaves discovery: its sessions move, once.
        (leaving, wid), (killed, kid) = [(p, w) for p, w in engines if w in by_worker][:2]
        leaving.p.send_signal(signal.SIGTERM)
        poll(lambda: wid not in listed(base), f"{wid} left discovery")
        for s in by_worker[wid]:
            w, rid = client.chat(s, sessions[s], f"{s} after {wid} left")
            check(w != wid and client.picks(rid)["mixed"] == (w, "rebound"),
                  f"{s} is rebound from {wid} to {w}")
            home[s] = w
        # A worker dies but stays listed (its lease is not revoked).
        killed.p.kill()
        killed.p.wait()
        before = failovers(base)
        on_kid = [s for s in sessions if home[s] == kid]  # some moved there just now
        first, *others = on_kid
        w, rid = client.chat(first, sessions[first], f"{first} after {kid} died")
        check(w != kid and client.picks(rid)["mixed"] == (w, "rebound"),
              f"{first} fails over from {kid} and is rebound to {w}")
        home[first] = w
        check(kid in listed(base), f"{kid} is still listed")
        for s in others:
            w, rid = client.chat(s, sessions[s], f"{s} after {kid} died")
            check(w != kid and client.picks(rid)["mixed"] == (w, "rebound"),
                  f"{s}: {kid}'s breaker is open, rebound to {w}")
            home[s] = w
        after = failovers(base)
        check(after == before + 1, f"only the first request tried {kid} ({before} -> {after})")
        for s, source in sessions.items():
            w, rid = client.chat(s, source, f"{s} last turn")
            check(w == home[s] and client.picks(rid)["mixed"] == (w, "hit"),
                  f"{s} stays on {home[s]}")
        moved = len(by_worker[wid]) + len(on_kid)
        for name, want in (("sessions", 9), ('binds_total{slot="prefill"}', 9),
                           ('rebinds_total{slot="prefill"}', moved),
                           # turns 1-2, the last turn, and the dead worker's first try
                           ('hits_total{slot="prefill"}', 9 * 2 + 9 + 1)):
            got = metric(base, "infera_router_session_affinity_" + name)
            check(got == want, f"infera_router_session_affinity_{name} {got} == {want}")


def test_pd():
    with Processes() as procs:
        etcd_port = etcd(procs)
        engines = fleet(procs, etcd_port, ["prefill", "prefill", "decode", "decode"])
        rproc, base = router(procs, etcd_port, 4, "--session-affinity", "both")
        client = Client(base, rproc)
        sessions = {f"pd-s{i}": SOURCES[i % 3] for i in range(4)}
        home = {}
        for turn in range(3):
            for s, source in sessions.items():
                w, rid = client.chat(s, source, f"{s} turn {turn}")
                picks = client.picks(rid)
                pair = (picks["prefill"][0], picks["decode"][0])
                check(pair[1] == w, f"{s}: the decode worker answered")
                if turn == 0:
                    home[s] = pair
                    check(picks["prefill"][1] == "new" and picks["decode"][1] == "new",
                          f"{s}: bound to {pair}")
                else:
                    check(pair == home[s] and picks["prefill"][1] == "hit" and
                          picks["decode"][1] == "hit", f"{s} turn {turn} keeps {home[s]}")
        # Ties of the idle fleet rotate per pool (the selector's per-role turn): the four
        # sessions' first picks do not all share one decode worker.
        check(len({pair[1] for pair in home.values()}) == 2,
              f"the sessions are bound over both decode workers ({home})")
        leaving = home["pd-s0"][1]
        proc = next(p for p, w in engines if w == leaving)
        proc.p.send_signal(signal.SIGTERM)
        poll(lambda: leaving not in listed(base), f"decode {leaving} left discovery")
        other = next(w for p, w in engines[2:] if w != leaving)
        for s, source in sessions.items():
            w, rid = client.chat(s, source, f"{s} after {leaving} left")
            picks = client.picks(rid)
            was = home[s]
            if was[1] == leaving:
                check(picks["prefill"] == (was[0], "hit") and picks["decode"] == (other, "rebound"),
                      f"{s}: prefill {was[0]} kept, decode rebound to {other}")
                home[s] = (was[0], other)
            else:
                check(picks["prefill"] == (was[0], "hit") and picks["decode"] == (was[1], "hit"),
                      f"{s}: untouched ({was})")
        for s, source in sessions.items():
            _, rid = client.chat(s, source, f"{s} last turn")
            picks = client.picks(rid)
            check((picks["prefill"][0], picks["decode"][0]) == home[s] and
                  picks["decode"][1] == "hit", f"{s} keeps {home[s]}")


def main():
    test_mixed()
    test_pd()
    print("all passed")


if __name__ == "__main__":
    main()
