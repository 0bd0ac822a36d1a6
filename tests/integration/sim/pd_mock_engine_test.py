#!/usr/bin/python3
"""Integration test of infera-mock-engine's PD roles (doc/pd.md §4).

For each protocol it starts a real prefill and a real decode mock engine on OS-picked
ports and plays the proxy's part by hand with the protocol's wire fields (doc/pd.md §3):
both legs succeed, streamed and not; the decode leg fails (before any byte) when its
prefill never happened, when the fields point elsewhere or are incomplete, and when the
prompt differs; both workers cache (and publish) the prompt's blocks; a decode leg without
PD fields is computed locally. Usage: pd_mock_engine_test.py BUILD_DIR
"""
import concurrent.futures
import json
import os
import sys
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, http, start_engine  # noqa: E402

BUILD = sys.argv[1]
ENGINE = os.path.join(BUILD, "apps/infera-mock-engine/infera-mock-engine")
PROMPT = list(range(1, 301))  # 18 full blocks + 12 tokens
POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4)


def pair(procs, protocol, *extra):
    """A prefill and a decode engine of `protocol`; returns (prefill fields, decode fields)."""
    common = ["--num-gpu-blocks", "1024", "--speedup", "20", "--pd-protocol", protocol,
              "--pd-kv-wait-ms", "1500", *extra]
    _, p = start_engine(procs, ENGINE, f"{protocol}-prefill", "--role", "prefill", *common)
    _, d = start_engine(procs, ENGINE, f"{protocol}-decode", "--role", "decode", *common)
    check("bootstrap" in p and "bootstrap" not in d,
          f"{protocol}: the prefill engine prints its bootstrap port, the decode engine none")
    return p, d


def url(fields, path):
    return f"http://127.0.0.1:{fields['port']}{path}"


def block_count(fields):
    status, body, _ = http("GET", url(fields, "/debug/kv-blocks"))
    return json.loads(body)["ranks"][0]["block_count"]


def sse_text(body):
    """The concatenated text of an SSE completion stream, and whether it ended with [DONE]."""
    text, done = "", False
    for line in body.splitlines():
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            for c in json.loads(line[6:])["choices"]:
                text += c.get("text", "")
    return text, done


def metric(fields, name):
    status, body, _ = http("GET", url(fields, "/metrics"))
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def concurrent_legs(p, pre_body, d, dec_body):
    """Sends both legs at once, the decode leg first (so it must wait for its KV);
    returns ((prefill status, body), (decode status, body))."""
    dec = POOL.submit(http, "POST", url(d, "/v1/completions"), dec_body)
    pre = POOL.submit(http, "POST", url(p, "/v1/completions"), pre_body)
    return pre.result()[:2], dec.result()[:2]


def test_sglang(procs):
    p, d = pair(procs, "sglang-bootstrap")
    boot = {"bootstrap_host": "127.0.0.1", "bootstrap_port": int(p["bootstrap"])}
    for stream in (False, True):
        body = {"prompt": PROMPT, "max_tokens": 5, "stream": stream, **boot,
                "bootstrap_room": 12345 + stream}
        # Concurrent, as SGLang's mini_lb sends them.
        (ps, pb), (ds, db) = concurrent_legs(p, body, d, body)
        check(ps == 200, f"sglang prefill leg answers 200 (stream={stream})")
        if stream:
            text, done = sse_text(db)
            check(ds == 200 and done and text, "sglang decode leg streams to [DONE]")
        else:
            out = json.loads(db)
            check(ds == 200 and out["usage"]["completion_tokens"] == 5,
                  "sglang decode leg generates max_tokens")
            check(json.loads(pb)["usage"]["completion_tokens"] == 1,
                  "sglang prefill leg computes one token whatever max_tokens says")
    check(block_count(p) >= 18 and block_count(d) >= 18,
          "both workers cache the prompt's 18 full blocks (their KV events)")
    # A decode leg whose room was never prefilled fails before any byte.
    ds, db, _ = http("POST", url(d, "/v1/completions"),
                     {"prompt": PROMPT, "max_tokens": 3, **boot, "bootstrap_room": 999})
    check(ds == 500 and "KV transfer failed" in json.loads(db)["error"]["message"],
          "sglang decode without its prefill (wrong room) fails with 500")
    ds, db, _ = http("POST", url(d, "/v1/completions"),
                     {"prompt": PROMPT, "max_tokens": 3, "bootstrap_room": 7})
    check(ds == 400 and "bootstrap_host" in json.loads(db)["error"]["message"],
          "sglang decode with incomplete bootstrap fields is 400")
    ps, pb, _ = http("POST", url(p, "/v1/completions"), {"prompt": PROMPT, "max_tokens": 3})
    check(ps == 400, "sglang prefill without PD fields is 400")
    ps, pb, _ = http("POST", url(p, "/v1/completions"),
                     {"prompt": PROMPT, **boot, "bootstrap_room": 2**63})
    check(ps == 400 and "2^63" in json.loads(pb)["error"]["message"],
          "sglang bootstrap_room >= 2^63 is 400")
    # Same room, different prompts: the decode notices.
    body = {"max_tokens": 2, **boot, "bootstrap_room": 4242}
    ps, _, _ = http("POST", url(p, "/v1/completions"), {**body, "prompt": PROMPT})
    ds, db, _ = http("POST", url(d, "/v1/completions"), {**body, "prompt": PROMPT[:-1]})
    check(ps == 200 and ds == 500 and "different prompt" in json.loads(db)["error"]["message"],
          "sglang decode given another prompt than its prefill fails")
    # Conditional disaggregation: a decode worker computes a plain request itself.
    ds, db, _ = http("POST", url(d, "/v1/completions"), {"prompt": PROMPT[:40], "max_tokens": 2})
    check(ds == 200 and json.loads(db)["usage"]["completion_tokens"] == 2,
          "a decode worker computes a request without PD fields locally")
    check(metric(d, "infera_mock_pd_kv_received_total") == 2, "decode counted 2 transfers")


def test_sglang_dp_rank(procs):
    # Two ranks: ipc endpoints (rank r appends _dp<r>), since port 0 + r cannot be bound.
    proc = procs.start("sglang-dp-prefill", [
        ENGINE, "--host", "127.0.0.1", "--port", "0", "--role", "prefill", "--pd-protocol",
        "sglang-bootstrap", "--dp-size", "2", "--speedup", "20",
        "--kv-events-endpoint", f"ipc://{procs.dir}/events"])
    line = proc.wait_line(r"infera-mock-engine listening .*").group(0)
    p = dict(kv.split("=", 1) for kv in line.split()[2:] if "=" in kv)
    boot = {"prompt": PROMPT, "max_tokens": 1, "bootstrap_host": "127.0.0.1",
            "bootstrap_port": int(p["bootstrap"]), "bootstrap_room": 11}
    req = {"Content-Type": "application/json", "X-Data-Parallel-Rank": "0"}
    r = urllib.request.Request(url(p, "/v1/completions"), data=json.dumps(boot).encode(),
                               method="POST", headers=req)
    try:
        urllib.request.urlopen(r, timeout=30)
        status = 200
    except urllib.error.HTTPError as e:
        status, msg = e.code, json.loads(e.read())["error"]["message"]
    check(status == 400 and "bootstrap_room % dp_size is 1" in msg,
          "sglang prefill: a DP rank that is not room % dp_size is 400")
    status, _, _ = http("POST", url(p, "/v1/completions"), boot)
    check(status == 200, "sglang prefill: room 11 runs on rank 1 of 2")


def test_nixl(procs):
    p, d = pair(procs, "vllm-nixl", "--engine-id", "nixl-engine-A")
    prefill_params = {"do_remote_decode": True, "do_remote_prefill": False,
                      "remote_engine_id": None, "remote_block_ids": None,
                      "remote_host": None, "remote_port": None}
    for stream in (False, True):
        # Serial, as vLLM's toy_proxy_server does.
        ps, pb, _ = http("POST", url(p, "/v1/completions"),
                         {"prompt": PROMPT, "max_tokens": 1, "stream": False,
                          "kv_transfer_params": prefill_params})
        check(ps == 200, f"nixl prefill leg answers 200 (stream={stream})")
        kv = json.loads(pb)["kv_transfer_params"]
        check(kv["do_remote_prefill"] is True and kv["remote_engine_id"] == "nixl-engine-A" and
              len(kv["remote_block_ids"]) == 19 and kv["remote_port"] == int(p["bootstrap"]),
              "nixl prefill answers kv_transfer_params for its decode")
        ds, db, _ = http("POST", url(d, "/v1/completions"),
                         {"prompt": PROMPT, "max_tokens": 4, "stream": stream,
                          "kv_transfer_params": kv})
        if stream:
            text, done = sse_text(db)
            check(ds == 200 and done, "nixl decode leg streams to [DONE]")
        else:
            check(ds == 200 and json.loads(db)["usage"]["completion_tokens"] == 4,
                  "nixl decode leg with the prefill's kv_transfer_params verbatim succeeds")
        # The same params twice: the KV was served once.
        ds, db, _ = http("POST", url(d, "/v1/completions"),
                         {"prompt": PROMPT, "max_tokens": 4, "kv_transfer_params": kv})
        check(ds == 500, "nixl decode leg replaying consumed kv_transfer_params fails")
    ps, pb, _ = http("POST", url(p, "/v1/completions"),
                     {"prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": prefill_params})
    kv = json.loads(pb)["kv_transfer_params"]
    mangled = dict(kv)
    del mangled["remote_block_ids"]
    ds, db, _ = http("POST", url(d, "/v1/completions"),
                     {"prompt": PROMPT, "max_tokens": 2, "kv_transfer_params": mangled})
    check(ds == 400 and "remote_block_ids" in json.loads(db)["error"]["message"],
          "nixl decode with kv_transfer_params missing a field is 400")
    wrong = dict(kv, remote_engine_id="other")
    ds, db, _ = http("POST", url(d, "/v1/completions"),
                     {"prompt": PROMPT, "max_tokens": 2, "kv_transfer_params": wrong})
    check(ds == 500 and "remote_engine_id" in json.loads(db)["error"]["message"],
          "nixl decode naming another engine fails")
    ps, pb, _ = http("POST", url(p, "/v1/completions"),
                     {"prompt": PROMPT, "max_tokens": 1, "stream": True,
                      "kv_transfer_params": prefill_params})
    check(ps == 200 and "kv_transfer_params" not in pb,
          "a streamed nixl prefill cannot hand over kv_transfer_params (as vLLM)")
    ps, _, _ = http("POST", url(p, "/v1/completions"),
                    {"prompt": PROMPT, "kv_transfer_params": {"do_remote_decode": False}})
    check(ps == 400, "nixl prefill without do_remote_decode is 400")


def test_mooncake(procs):
    p, d = pair(procs, "vllm-mooncake", "--engine-id", "mc-engine")
    addr = f"http://127.0.0.1:{p['bootstrap']}"
    for stream in (False, True):
        tid = f"xfer-{stream}"
        pre_body = {"prompt": PROMPT, "max_tokens": 1, "stream": False,
                    "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False,
                                           "transfer_id": tid}}
        dec_body = {"prompt": PROMPT, "max_tokens": 3, "stream": stream,
                    "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                           "remote_bootstrap_addr": addr,
                                           "remote_engine_id": "mc-engine", "transfer_id": tid}}
        (ps, _), (ds, db) = concurrent_legs(p, pre_body, d, dec_body)
        check(ps == 200, f"mooncake prefill leg answers 200 (stream={stream})")
        if stream:
            check(ds == 200 and sse_text(db)[1], "mooncake decode leg streams to [DONE]")
        else:
            check(ds == 200 and json.loads(db)["usage"]["completion_tokens"] == 3,
                  "mooncake decode leg succeeds concurrently with its prefill")
    ds, db, _ = http("POST", url(d, "/v1/completions"),
                     {"prompt": PROMPT, "max_tokens": 3,
                      "kv_transfer_params": {"do_remote_prefill": True,
                                             "remote_bootstrap_addr": addr,
                                             "remote_engine_id": "mc-engine",
                                             "transfer_id": "never-sent"}})
    check(ds == 500 and "holds no KV" in json.loads(db)["error"]["message"],
          "mooncake decode whose transfer_id was never prefilled fails with 500")
    ds, db, _ = http("POST", url(d, "/v1/completions"),
                     {"prompt": PROMPT, "kv_transfer_params": {"do_remote_prefill": True,
                                                                "transfer_id": "x"}})
    check(ds == 400 and "remote_bootstrap_addr" in json.loads(db)["error"]["message"],
          "mooncake decode without remote_bootstrap_addr is 400")


def test_flags():
    with Processes() as procs:
        code, out = procs.run("bad-role", [ENGINE, "--port", "0", "--role", "decode"], timeout=30)
        check(code == 2 and "--pd-protocol" in out, "--role decode without --pd-protocol exits 2")
        code, out = procs.run("bad-mixed", [ENGINE, "--port", "0", "--pd-protocol", "vllm-nixl"],
                              timeout=30)
        check(code == 2, "--pd-protocol on a mixed worker exits 2")


def main():
    test_flags()
    for test in (test_sglang, test_sglang_dp_rank, test_nixl, test_mooncake):
        with Processes() as procs:
            test(procs)
    print("all PD mock engine tests passed")


if __name__ == "__main__":
    main()
