#!/usr/bin/python3
"""infera-router doctor end to end (doc/operations.md "Doctor"): the real router binary's
`doctor` subcommand and start-up checks against real infera-mock-engines, healthy and
misconfigured in each way the doctor names.
Usage: doctor_test.py BUILD_DIR TOKENIZER_DIR

1. One fleet, two doctor runs with --fingerprints (the router's own --worker flags):
   healthy vLLM- and SGLang-shaped engines pass every check; each misconfigured worker
   fails exactly its check, named, with its cause and fix: --unstable-hash-seed (after a
   restart: hash-stability, PYTHONHASHSEED=0), --block-size 32 against the record's 16,
   --render-differently (one token more), no --tokenizer (the README's old engine
   command), events on another port than the record's, --kv-events-hash-seed (events
   whose tokens match nothing), a model name the engine does not serve, an unreachable
   URL. A healthy engine restarted keeps its fingerprint ("unchanged across a restart").
   Exit status 1 with failures, 0 for the healthy workers alone (--workers-file).
2. --kv-events-topic that the engine does not publish: kv-events fails, fix names the topic.
3. etcd discovery: a worker registered by the engine itself is found and passes; an
   empty prefix is "no worker" (exit 2).
4. Start-up: a router at the default flags (--startup-doctor passive) logs each worker's
   checks (an unreachable worker, a model not served, an events endpoint nobody serves);
   with --startup-doctor active it logs the block-size failure without any traffic.
Under the sanitizers (INFERA_SANITIZED=1, make test's ASan smoke) the engines and the
doctor load no tokenizer (27 s per load there): render parity is then skipped and the
router-tokenizer check fails, which the test expects.
Waits are bounded polls; no fixed sleeps.
"""
import json
import os
import re
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, binaries, check, free_port, start_etcd  # noqa: E402

BUILD = sys.argv[1]
SANITIZED = bool(os.environ.get("INFERA_SANITIZED"))
TOKENIZER = None if SANITIZED else sys.argv[2]
_, ENGINE, ROUTER = binaries(BUILD)
MODEL = "mock-model"


class Engine:
    """A mock engine on fixed ports (so a restart keeps its worker id and endpoints)."""

    def __init__(self, procs, name, *extra, tokenizer=True, record_events_port=None,
                 record_model=MODEL, engine_kind="vllm", block=16):
        self.procs, self.name, self.extra = procs, name, list(extra)
        self.tokenizer = tokenizer and TOKENIZER is not None
        self.http, self.events = free_port(), free_port()
        self.kind = engine_kind
        self.restarts = 0
        self.flag = (f"http://127.0.0.1:{self.http},model_name={record_model},engine={engine_kind},"
                     f"kv_events_endpoint=tcp://127.0.0.1:{record_events_port or self.events},"
                     f"kv_block_size={block}")
        self.record = {"url": f"http://127.0.0.1:{self.http}", "model_name": record_model,
                       "engine": engine_kind, "kv_block_size": block,
                       "kv_events_endpoint": f"tcp://127.0.0.1:{record_events_port or self.events}"}
        self.wid = f"127.0.0.1:{self.http}"
        self.start()

    def start(self):
        argv = [ENGINE, "--host", "127.0.0.1", "--port", str(self.http), "--model-name", MODEL,
                "--engine", self.kind, "--kv-events-endpoint", f"tcp://127.0.0.1:{self.events}",
                *self.extra]
        if self.tokenizer:
            argv += ["--tokenizer", TOKENIZER]
        self.proc = self.procs.start(f"{self.name}-{self.restarts}", argv)
        self.proc.wait_line(r"infera-mock-engine listening")

    def restart(self):
        self.proc.p.terminate()
        self.proc.p.wait(timeout=20)
        self.restarts += 1
        self.start()


def parse(out):
    """{(worker or 'router', check): {"verdict", "detail", "cause", "fix"}} of a report."""
    results, group, last = {}, None, None
    for line in out.splitlines():
        if line == "router" or line.startswith("worker "):
            group = "router" if line == "router" else line.split(" ", 1)[1]
            continue
        m = re.match(r"^  (ok|skip|warn|FAIL)\s+(\S+)\s+(.*)$", line)
        if m:
            last = {"verdict": m.group(1), "detail": m.group(3), "cause": "", "fix": ""}
            results[(group, m.group(2))] = last
            continue
        m = re.match(r"^\s+(cause|fix):\s+(.*)$", line)
        if m and last is not None:
            last[m.group(1)] = m.group(2)
    return results


def doctor(procs, name, *args, expect_rc, tokenizer=True):
    # 2 s instead of 5 per exchange: the faults that show as a timeout (no events, no
    # probe tokens, a filtered topic) take that long each; no verdict depends on it.
    argv = [ROUTER, "doctor", "--timeout-ms", "2000", *args]
    if TOKENIZER and tokenizer:
        argv += ["--router-tokenizer-path", TOKENIZER]
    rc, out = procs.run(name, argv, timeout=120)
    print(out, flush=True)
    check(rc == expect_rc, f"{name}: exit status {rc} (expected {expect_rc})")
    return parse(out)


def expect(results, engine, check_name, verdict, *needles):
    key = (engine.wid if isinstance(engine, Engine) else engine, check_name)
    r = results.get(key)
    check(r is not None, f"{key} reported")
    text = " ".join([r["detail"], r["cause"], r["fix"]])
    check(r["verdict"] == verdict, f"{key} is {verdict} ({r['verdict']}: {text[:200]})")
    if verdict == "FAIL":
        check(r["cause"] and r["fix"], f"{key}: the failure has a cause and a fix")
    for needle in needles:
        check(needle in text, f"{key} says {needle!r}")


def healthy(results, engine, first_run):
    for c in ("reachable", "model", "kv-events", "block-size"):
        expect(results, engine, c, "ok")
    if TOKENIZER:
        expect(results, engine, "render-parity", "ok")
    else:
        expect(results, engine, "render-parity", "skip")
    if first_run:
        expect(results, engine, "hash-stability", "skip", "recorded")


T0 = time.time()


def phase(what):
    print(f"== {time.time() - T0:.1f} s: {what}", flush=True)


def main():
    with Processes() as procs:
        fp = os.path.join(procs.dir, "fingerprints.json")
        h1 = Engine(procs, "healthy-vllm")
        h2 = Engine(procs, "healthy-sglang", engine_kind="sglang")
        # The engines whose render parity is not under test load no tokenizer (their
        # render-parity check then fails too: the byte-level fallback).
        unstable = Engine(procs, "unstable-seed", "--unstable-hash-seed", tokenizer=False)
        b32 = Engine(procs, "block32", "--block-size", "32", tokenizer=False)
        no_events = Engine(procs, "no-events", record_events_port=free_port(), tokenizer=False)
        masked = Engine(procs, "masked-events", "--kv-events-hash-seed", "7", tokenizer=False)
        wrong_model = Engine(procs, "wrong-model", record_model="llama-70b", tokenizer=False)
        fleet = [h1, h2, unstable, b32, no_events, masked, wrong_model]
        if TOKENIZER:
            differs = Engine(procs, "render-differently", "--render-differently")
            no_tok = Engine(procs, "no-tokenizer", tokenizer=False)
            fleet += [differs, no_tok]
        down = f"127.0.0.1:{free_port()}"
        flags = [a for e in fleet for a in ("--worker", e.flag)]
        flags += ["--worker", f"http://{down},model_name={MODEL}"]

        phase("engines started")
        # 1. First run: every fault but the seed shows at once.
        r = doctor(procs, "doctor-1", *flags, "--fingerprints", fp, expect_rc=1)
        if TOKENIZER:
            expect(r, "router", "router-tokenizer", "ok", "92 tokens")
        else:
            expect(r, "router", "router-tokenizer", "FAIL", "--router-tokenizer-path")
        healthy(r, h1, True)
        healthy(r, h2, True)
        if TOKENIZER:
            expect(r, h2, "render-parity", "ok", "SGLang shape")
        expect(r, unstable, "hash-stability", "skip", "recorded")
        expect(r, b32, "block-size", "FAIL", "blocks of 32 tokens", "router hashes 16",
               "vLLM --block-size 16", "kv_block_size=32")
        expect(r, no_events, "kv-events", "FAIL", "no connection to", "--kv-events-config",
               "enable_kv_cache_events")
        expect(r, no_events, "block-size", "skip")
        expect(r, masked, "kv-events", "FAIL", "none with the probe's token ids",
               "--kv-events-hash-seed")
        expect(r, wrong_model, "model", "FAIL", "'llama-70b'", "model_name=mock-model",
               "--served-model-name llama-70b")
        expect(r, down, "reachable", "FAIL", "Connection refused")
        expect(r, down, "kv-events", "skip", "unreachable")
        if TOKENIZER:
            # One token more at the end of the rendering is caught.
            expect(r, differs, "render-parity", "FAIL", "router 92 ids, worker 93",
                   "first difference at position 92", "--tokenizer DIR")
            expect(r, differs, "block-size", "ok")
            expect(r, no_tok, "render-parity", "FAIL", "--tokenizer DIR")
        for e in (unstable, b32, masked):
            expect(r, e, "reachable", "ok")
        saved = json.load(open(fp))["workers"]
        check(h1.wid in saved and unstable.wid in saved and b32.wid in saved,
              "fingerprints recorded for the workers whose probe was seen")

        phase("first doctor run")
        # The healthy engine and the unstable one restart (same ports, same flags).
        h1.restart()
        unstable.restart()
        r = doctor(procs, "doctor-2", *flags, "--fingerprints", fp, expect_rc=1)
        expect(r, h1, "hash-stability", "ok", "unchanged across a restart")
        expect(r, h2, "hash-stability", "skip", "has not restarted")
        expect(r, unstable, "hash-stability", "FAIL", "hashes the same tokens differently",
               "PYTHONHASHSEED=0")
        expect(r, unstable, "block-size", "ok")

        phase("restarts and second run")
        # The healthy workers alone, from a workers file: exit 0 (with a tokenizer).
        wf = os.path.join(procs.dir, "workers.json")
        with open(wf, "w") as f:
            json.dump([h1.record, h2.record], f)
        r = doctor(procs, "doctor-file", "--workers-file", wf, expect_rc=0 if TOKENIZER else 1)
        healthy(r, h1, False)
        healthy(r, h2, False)
        # The router's other flags are accepted (a router command line with `doctor`).
        rc, out = procs.run("doctor-extra", [ROUTER, "doctor", "--workers-file", wf,
                                             "--router-policy", "kv-aware", "--port", "0"],
                            timeout=60)
        check("ignoring the router flags it does not use: --router-policy kv-aware --port 0" in out,
              "other router flags are named and ignored")
        rc, out = procs.run("doctor-bad", [ROUTER, "doctor", "--worker", "not-a-url"], timeout=30)
        check(rc == 2 and "--worker" in out, f"a bad --worker is the router's error, exit 2 ({rc})")

        phase("workers file and flag errors")
        # 2. A topic the engine does not publish.
        r = doctor(procs, "doctor-topic", "--worker", h1.flag, "--kv-events-topic", "other",
                   expect_rc=1, tokenizer=False)
        expect(r, h1, "kv-events", "FAIL", "'kv-events'", "--kv-events-topic kv-events")

        phase("topic")
        # 3. etcd discovery: the engine registers itself.
        cport, pport = free_port(), free_port()
        start_etcd(procs, "etcd", os.path.join(procs.dir, "etcd"), cport, pport)
        etcd = f"127.0.0.1:{cport}"
        reg = Engine(procs, "etcd-engine", "--etcd-endpoint", etcd)
        r = doctor(procs, "doctor-etcd", "--discovery-backend", "etcd", "--etcd-endpoint", etcd,
                   expect_rc=0 if TOKENIZER else 1)
        healthy(r, reg, False)
        rc, out = procs.run("doctor-etcd-empty", [ROUTER, "doctor", "--discovery-backend", "etcd",
                                                  "--etcd-endpoint", etcd, "--etcd-prefix",
                                                  "/nobody/", "--discovery-wait-ms", "300"],
                            timeout=30)
        check(rc == 2 and "no worker" in out, f"no worker found: exit 2 ({rc}): {out[-200:]}")

        phase("etcd")
        # 4. The router's start-up checks, logged.
        argv = [ROUTER, "--host", "127.0.0.1", "--port", "0", "--kv-events-topic", "kv-events"]
        for w in (h1.flag, no_events.flag, wrong_model.flag, f"http://{down},model_name={MODEL}"):
            argv += ["--worker", w]
        router = procs.start("router-passive", argv)
        router.wait_line(r"infera-router listening")
        router.wait_line(rf"doctor worker={re.escape(down)} check=reachable verdict=FAIL .*fix=")
        router.wait_line(rf"doctor worker={re.escape(no_events.wid)} check=kv-events verdict=FAIL"
                         r" .*no connection to.*fix=.*--kv-events-config")
        router.wait_line(rf"doctor worker={re.escape(wrong_model.wid)} check=model verdict=FAIL")
        router.wait_line(rf"doctor worker={re.escape(h1.wid)} checks=\d+ failed=0")
        check(not router.grep(rf"doctor worker={re.escape(h1.wid)} .*verdict=FAIL"),
              "the healthy worker has no failure at start-up")
        check(not router.grep(r"doctor .*check=hash-stability verdict=(ok|FAIL)"),
              "passive start-up checks send no probe (hash stability not judged)")
        active = procs.start("router-active", [
            ROUTER, "--host", "127.0.0.1", "--port", "0", "--worker", b32.flag,
            "--startup-doctor", "active", "--doctor-fingerprints",
            os.path.join(procs.dir, "router-fp.json")])
        active.wait_line(rf"doctor worker={re.escape(b32.wid)} check=block-size verdict=FAIL "
                         r".*blocks of 32 tokens.*fix=.*--block-size 16")
        active.wait_line(rf"doctor worker={re.escape(b32.wid)} check=hash-stability verdict=skip"
                         r" .*recorded")
        phase("start-up checks")
        for p in (router, active):
            p.p.terminate()
            check(p.p.wait(timeout=30) == 0, f"{p.name} stops cleanly on SIGTERM")
    print("doctor_test: PASS")


if __name__ == "__main__":
    main()
