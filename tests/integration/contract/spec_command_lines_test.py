#!/usr/bin/python3
"""The spec's own command lines (../shared/spec/kv-aware-routing.md), verbatim apart
from hosts and ports, against the real infera-router (issue 26, part 1).

The tokenizer is the Hugging Face model id `Qwen/Qwen3-0.6B`, found offline in a hub
cache this test lays out exactly as huggingface_hub does (HF_HOME/hub/
models--Qwen--Qwen3-0.6B/{refs/main, blobs/<sha256>, snapshots/<commit>/ -> blobs}),
from the Qwen 3 tokenizer fixture (scripts/fetch-fixtures). The fleet is etcd (the
spec's `--discovery-backend etcd`) with two infera-mock-engines registering
themselves, a prefill and a decode engine (sglang-bootstrap), both tokenizing with the
same model id from the cache (so the prefill's KV events carry the router's token ids,
and the decode engine accepts the transferred KV as its prompt's).

1. The server command line: the router starts, resolves the id through the hub cache
   (logged), lists both workers, and a repeated chat routes to the prefill worker with
   cache hits.
2. The decode-demand command line under `RUST_LOG=info,infera_router::decode_demand=debug`
   with `--router-backend rust ... --decode-input-demand shadow` (plus the
   deployment's discovery and transport flags, as the spec says to keep them): the
   decode_demand debug lines appear and the prefill pick hits; with `RUST_LOG=info`
   none appear.
3. What must fail does, with exit 2 before anything starts: an unknown RUST_LOG or
   --log-level target, a model id that is not in the cache (the message names the path
   tried), --request-transport nats (not built yet, issue 26).
Usage: spec_command_lines_test.py BUILD_DIR QWEN3_TOKENIZER_DIR
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, binaries, check, fail, free_port, http, poll,  # noqa: E402
                     start_etcd)

BUILD, FIXTURE = sys.argv[1], sys.argv[2]
_, ENGINE, ROUTER = binaries(BUILD)
MODEL = "Qwen/Qwen3-0.6B"
COMMIT = "c1899de289a04d12100db370d81485cdf75e47ca"  # any 40-hex name; refs/main holds it


def make_hub_cache(hf_home):
    """huggingface_hub's layout: files are blobs named by their sha256, the snapshot
    holds relative symlinks to them, refs/main names the snapshot."""
    repo = os.path.join(hf_home, "hub", "models--Qwen--Qwen3-0.6B")
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(os.path.join(repo, "refs"))
    snapshot = os.path.join(repo, "snapshots", COMMIT)
    os.makedirs(snapshot)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(FIXTURE, name), "rb") as f:
            data = f.read()
        blob = hashlib.sha256(data).hexdigest()
        with open(os.path.join(repo, "blobs", blob), "wb") as f:
            f.write(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snapshot, name))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(COMMIT)
    return snapshot


def start_router_cmd(procs, name, argv, env):
    """Starts infera-router with argv (the spec's flags plus --host/--port); returns
    (Proc, base URL) once it listens and lists both workers and is ready."""
    proc = procs.start(name, argv, env=env)
    port = proc.wait_line(r"infera-router listening on \S*:(\d+)", timeout=240).group(1)
    base = f"http://127.0.0.1:{port}"
    poll(lambda: http("GET", base + "/health")[0] == 200 and
         json.loads(http("GET", base + "/health")[1]).get("active_workers") == 2,
         f"{name}: ready with the prefill and decode workers from etcd", timeout=120)
    # /ready: the engines' replay has rebuilt the views (a repeated prompt can hit).
    poll(lambda: http("GET", base + "/ready")[0] == 200, f"{name}: /ready 200", timeout=120)
    return proc, base


def chat(base, rid):
    system = ("You are a careful assistant for a shipping company; answer from the manifest. "
              * 12).strip()
    body = {"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": "Where is container 7?"}]}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json",
                                                         "X-Infera-Request-Id": rid})
    with urllib.request.urlopen(req, timeout=60) as r:
        check(r.status == 200, f"chat {rid} answered 200")


def prefill_hits(router, rid):
    m = router.wait_line(rf"pick policy=kv-aware role=prefill request_id={rid} .*"
                         rf"cache_hits=(\d+) request_blocks=(\d+)")
    return int(m.group(1)), int(m.group(2))


def expect_exit_2(procs, name, argv, env, needle):
    rc, out = procs.run(name, argv, timeout=120, env=env)
    check(rc == 2 and needle in out, f"{name}: exit 2 naming '{needle}' (got {rc}: {out[-300:]!r})")


def main():
    if not os.path.exists(os.path.join(FIXTURE, "tokenizer.json")):
        fail(f"no tokenizer.json in {FIXTURE} (run scripts/fetch-fixtures)")
    tmp = tempfile.mkdtemp(prefix="infera-spec-")
    try:
        hf_home = os.path.join(tmp, "hf")
        snapshot = make_hub_cache(hf_home)
        env = dict(os.environ, HF_HOME=hf_home)
        for v in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "RUST_LOG", "INFERA_ROUTER_BACKEND"):
            env.pop(v, None)
        with Processes() as procs:
            run(procs, env, tmp, snapshot)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("spec command lines OK", flush=True)


def run(procs, env, tmp, snapshot):
    client, peer = free_port(), free_port()
    start_etcd(procs, "etcd", os.path.join(tmp, "etcd"), client, peer)
    etcd = f"127.0.0.1:{client}"
    common = ["--host", "127.0.0.1", "--port", "0", "--kv-events-endpoint", "tcp://127.0.0.1:0",
              "--kv-replay-endpoint", "tcp://127.0.0.1:0", "--model-name", MODEL,
              "--pd-protocol", "sglang-bootstrap", "--etcd-endpoint", etcd,
              "--advertise-host", "127.0.0.1"]
    prefill = procs.start("prefill", [ENGINE, *common, "--role", "prefill",
                                      "--tokenizer", MODEL], env=env)
    # The decode engine checks the transferred KV is its prompt's: it tokenizes alike.
    decode = procs.start("decode", [ENGINE, *common, "--role", "decode", "--tokenizer", MODEL],
                         env=env)
    for p in (prefill, decode):
        p.wait_line(r"infera-mock-engine listening", timeout=240)

    # 1. The spec's server command line.
    server = [ROUTER, "--host", "127.0.0.1", "--port", "0", "--etcd-endpoint", etcd,
              "--router-policy", "kv-aware",
              "--router-tokenizer-path", MODEL,
              "--kv-overlap-weight", "1.0",
              "--discovery-backend", "etcd", "--request-transport", "http",
              "--kv-event-transport", "zmq"]
    router, base = start_router_cmd(procs, "router-server", server, env)
    line = router.wait_line(r"tokenizer Qwen/Qwen3-0\.6B -> (\S+) \(Hugging Face hub cache\)")
    check(line.group(1) == snapshot, f"the id resolved to the snapshot {snapshot}")
    chat(base, "spec-1")
    chat(base, "spec-2")
    hits1, blocks1 = prefill_hits(router, "spec-1")
    hits2, blocks2 = prefill_hits(router, "spec-2")
    # The engine stores the prompt's full blocks; the last may still be filling.
    check(blocks1 > 0 and hits2 > 0 and hits2 >= blocks2 - 1,
          f"server command line: the repeat hits the prompt's blocks on the prefill worker "
          f"({hits1}/{blocks1} then {hits2}/{blocks2})")
    router.p.terminate()
    check(router.p.wait(60) == 0, "router-server exits 0 on SIGTERM")

    # 2. The decode-demand command line, under the spec's RUST_LOG.
    demand = [ROUTER, "--host", "127.0.0.1", "--port", "0",
              "--router-backend", "rust", "--router-policy", "kv-aware",
              "--router-tokenizer-path", MODEL, "--decode-input-demand", "shadow",
              "--etcd-endpoint", etcd, "--discovery-backend", "etcd",
              "--request-transport", "http", "--kv-event-transport", "zmq"]
    for rust_log, debug_expected in (("info,infera_router::decode_demand=debug", True),
                                     ("info", False)):
        name = "router-demand-debug" if debug_expected else "router-demand-info"
        router, base = start_router_cmd(procs, name, demand, dict(env, RUST_LOG=rust_log))
        check(bool(router.grep(r"--router-backend rust: infera-router has one native")),
              f"{name}: --router-backend rust accepted and explained")
        rid = "demand-" + name
        chat(base, rid)
        hits, blocks = prefill_hits(router, rid)
        check(hits > 0 and hits >= blocks - 1, f"{name}: the prefill pick hits ({hits}/{blocks})")
        lines = router.grep(rf"\[decode_demand\] \[debug\] decode_demand mode=shadow "
                            rf"request_id={rid} ")
        if debug_expected:
            check(len(lines) == 1 and "candidates=" in lines[0] and "container" not in lines[0],
                  f"RUST_LOG={rust_log}: one decode_demand debug line, no prompt text: "
                  f"{lines[:1]}")
        else:
            check(not router.grep(r"\[decode_demand\] \[debug\]"),
                  f"RUST_LOG={rust_log}: no decode_demand debug line")
        router.p.terminate()
        check(router.p.wait(60) == 0, f"{name} exits 0 on SIGTERM")

    # 3. What must be refused is, at start, with exit 2.
    expect_exit_2(procs, "bad-rust-log", demand,
                  dict(env, RUST_LOG="info,infera_router::decode_demnd=debug"),
                  "has no logger of its own")
    expect_exit_2(procs, "bad-log-level", demand + ["--log-level", "info,decode_demnd=debug"],
                  env, "unknown log target 'decode_demnd'")
    expect_exit_2(procs, "absent-model", [ROUTER, "--port", "0", "--router-tokenizer-path",
                                          "Qwen/Qwen9-9B"], env,
                  os.path.join(env["HF_HOME"], "hub", "models--Qwen--Qwen9-9B", "refs", "main"))
    expect_exit_2(procs, "bad-transport", [ROUTER, "--port", "0", "--request-transport", "grpc"],
                  env, "--request-transport must be http or nats, got 'grpc'")


if __name__ == "__main__":
    main()
