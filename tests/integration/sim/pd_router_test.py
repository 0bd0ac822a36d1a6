#!/usr/bin/python3
"""The real infera-router's PD dispatcher with real infera-mock-engines in --role prefill
and --role decode, for each protocol (doc/pd.md §6, issue 13).

For sglang-bootstrap, vllm-nixl and vllm-mooncake: a prefill and a decode engine, the
router with static --worker records carrying disagg_mode / disagg_meta params, and the
official `openai` npm client (completions and chat, streamed and not). Then each
engine's GET /debug/requests shows the fields each leg received (asserted exactly), the
decode engine's metrics show one KV hand-off per request, and the router's active
blocks are back to 0 on both workers. Failure paths on one pair: a decode engine
killed mid-stream (one SSE error event, then the end), a client that disconnects
mid-stream (both legs cancelled), a missing pool (503) and protocols that disagree
(501), in the API's error shape.
Usage: pd_router_test.py BUILD_DIR NODE_MODULES
"""
import http.client
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, debug_requests, http as http_json, poll, start_engine, start_router, worker_flag  # noqa: E402,E501

BUILD, NODE_MODULES = sys.argv[1], os.path.abspath(sys.argv[2])
ENGINE = os.path.join(BUILD, "apps/infera-mock-engine/infera-mock-engine")
ROUTER = os.path.join(BUILD, "apps/infera-router/infera-router")
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pd_openai_client.mjs")
NIXL_PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False,
                       "remote_engine_id": None, "remote_block_ids": None,
                       "remote_host": None, "remote_port": None}


def pd_pair(procs, protocol, decode_speedup="20"):
    """A prefill and a decode engine of `protocol` and their --worker flags."""
    common = ["--num-gpu-blocks", "2048", "--pd-protocol", protocol, "--pd-kv-wait-ms", "5000"]
    engine_id = f"engine-{protocol}"
    _, p = start_engine(procs, ENGINE, f"{protocol}-prefill", "--role", "prefill", "--speedup",
                        "20", "--engine-id", engine_id, *common)
    dproc, d = start_engine(procs, ENGINE, f"{protocol}-decode", "--role", "decode", "--speedup",
                            decode_speedup, *common)
    pflag = worker_flag(p) + f",disagg_mode=prefill,disagg_protocol={protocol}"
    if protocol == "sglang-bootstrap":
        pflag += f",bootstrap_host=127.0.0.1,bootstrap_port={p['bootstrap']}"
    if protocol == "vllm-mooncake":
        pflag += f",bootstrap_addr=127.0.0.1:{p['bootstrap']},engine_id={engine_id}"
    dflag = worker_flag(d) + f",disagg_mode=decode,disagg_protocol={protocol}"
    return p, d, dproc, [pflag, dflag], engine_id


def url(fields, path):
    return f"http://127.0.0.1:{fields['port']}{path}"


def metric(base, name):
    _, body, _ = http_json("GET", base + "/metrics")
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def active_blocks_zero(router, fields_list):
    _, body, _ = http_json("GET", router + "/metrics")
    for f in fields_list:
        m = re.search(r'^infera_policy_active_blocks\{worker_id="127\.0\.0\.1:%s"\} (\S+)$'
                      % f["port"], body, re.M)
        if m is None or float(m.group(1)) != 0:
            return False
    return True


def run_client(router, protocol):
    env = dict(os.environ, ROUTER_URL=router, NODE_MODULES=NODE_MODULES, PD_PROTOCOL=protocol)
    r = subprocess.run(["node", CLIENT], env=env, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"openai client: {r.stdout}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])["ids"]


def test_protocol(protocol):
    with Processes() as procs:
        p, d, _, workers, engine_id = pd_pair(procs, protocol)
        rproc, router = start_router(procs, ROUTER, workers, "--router-policy", "kv-aware",
                                     "--kv-prefill-overlap-weight", "20",
                                     "--kv-decode-overlap-weight", "2")
        ids = run_client(router, protocol)
        for role, f, weight in (("prefill", p, "20.0"), ("decode", d, "2.0")):
            lines = rproc.grep(r"pick policy=kv-aware role=%s request_id=\S+ "
                               r"picked=127\.0\.0\.1:%s " % (role, f["port"]))
            # The two completions carry token ids (the chats are estimates: no cache term).
            weighted = [line for line in lines if f" w_overlap={weight} " in line]
            check(len(lines) == 4 and len(weighted) == 2,
                  f"{protocol}: 4 pick lines with role={role}, the token-id ones with "
                  f"w_overlap={weight}")
        pre, dec = debug_requests(p), debug_requests(d)
        check(len(pre) == 4 and len(dec) == 4,
              f"{protocol}: each engine got one leg per request ({len(pre)}, {len(dec)})")
        for i, (a, b) in enumerate(zip(pre, dec)):
            if protocol == "sglang-bootstrap":
                check(a["bootstrap_host"] == "127.0.0.1" and
                      a["bootstrap_port"] == int(p["bootstrap"]) and
                      0 <= a["bootstrap_room"] < 2**63 and a == b,
                      f"sglang: request {i}: both legs got the client's body + the bootstrap "
                      "fields of the prefill worker, one room")
            elif protocol == "vllm-nixl":
                check(a["kv_transfer_params"] == NIXL_PREFILL_PARAMS and a["max_tokens"] == 1 and
                      a["stream"] is False and "stream_options" not in a,
                      f"nixl: request {i}: the prefill leg's exact rewrite")
                kv = b["kv_transfer_params"]
                check(kv["do_remote_prefill"] is True and kv["remote_engine_id"] == engine_id and
                      kv["remote_port"] == int(p["bootstrap"]) and
                      len(kv["remote_block_ids"]) > 0 and
                      b.get("stream", False) == (i % 2 == 1) and "max_tokens" in b,
                      f"nixl: request {i}: the decode leg got the prefill's kv_transfer_params "
                      "and the client's stream/max_tokens")
            else:
                tid = "xfer-" + ids[i]
                check(a["kv_transfer_params"] == {"do_remote_decode": True,
                                                  "do_remote_prefill": False,
                                                  "transfer_id": tid} and a["max_tokens"] == 1,
                      f"mooncake: request {i}: the prefill leg's transfer id {tid}")
                check(b["kv_transfer_params"] == {
                    "do_remote_decode": False, "do_remote_prefill": True,
                    "remote_bootstrap_addr": f"http://127.0.0.1:{p['bootstrap']}",
                    "remote_engine_id": engine_id, "transfer_id": tid},
                    f"mooncake: request {i}: the decode leg's kv_transfer_params")
        check(dec[0]["max_tokens"] == (4 if protocol == "vllm-mooncake" else 5),
              f"{protocol}: the decode leg's max_tokens (mooncake: the client's − 1)")
        check(metric(url(d, ""), "infera_mock_pd_kv_received_total") == 4 and
              metric(url(p, ""), "infera_mock_pd_kv_served_total") == 4,
              f"{protocol}: 4 KV hand-offs, prefill -> decode")
        poll(lambda: active_blocks_zero(router, [p, d]),
             f"{protocol}: router active blocks back to 0 on both workers")
        _, m, _ = http_json("GET", router + "/metrics")
        check('infera_pd_plans_total{kind="disaggregated"} 4' in m and
              f'infera_router_picks_total{{role="prefill",worker_id="127.0.0.1:{p["port"]}"}} 4'
              in m and
              f'infera_router_picks_total{{role="decode",worker_id="127.0.0.1:{d["port"]}"}} 4'
              in m and 'infera_pd_dispatch_duration_seconds_count{leg="prefill"' in m,
              f"{protocol}: router metrics: 4 disaggregated plans, picks per role, leg durations")


def stream_request(router, body):
    """Starts a streamed completion; returns (connection, response) after the head."""
    port = int(router.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def test_failures():
    with Processes() as procs:
        p, d, dproc, workers, _ = pd_pair(procs, "vllm-nixl", decode_speedup="1")
        _, router = start_router(procs, ROUTER, workers, "--router-policy", "kv-aware")
        long_body = {"model": "mock-model", "prompt": list(range(1, 200)), "max_tokens": 4000,
                     "stream": True}

        # A client that goes away mid-stream: both legs end, the decode engine stops.
        conn, resp = stream_request(router, long_body)
        check(resp.status == 200 and resp.read1(65536).startswith(b"data: "),
              "the decode stream started")
        conn.sock.shutdown(2)
        conn.close()
        poll(lambda: metric(router, 'infera_router_requests_total{endpoint="completions",'
                            'status="499"}') == 1, "the router counted the disconnect as 499")
        poll(lambda: metric(url(d, ""), 'vllm:num_requests_running{model_name="mock-model",'
                            'engine="0"}') == 0, "the decode engine stopped generating")
        poll(lambda: active_blocks_zero(router, [p, d]), "active blocks back to 0 after cancel")

        # The decode engine killed mid-stream: one SSE error event, then the stream ends.
        conn, resp = stream_request(router, long_body)
        first = resp.read1(65536)
        check(resp.status == 200 and first.startswith(b"data: "), "a second stream started")
        dproc.p.kill()
        rest = resp.read().decode()
        conn.close()
        events = [e for e in (first.decode() + rest).split("\n\n") if e.strip()]
        check(events[-1].startswith('data: {"error"') and "failed mid-stream" in events[-1] and
              sum(e.startswith('data: {"error"') for e in events) == 1,
              "a decode killed mid-stream ends the stream with one SSE error event")
        poll(lambda: active_blocks_zero(router, [p, d]),
             "active blocks back to 0 after the decode died")
        # With the decode pool gone (its breaker opens or it is unreachable): a clean 5xx.
        status, body, _ = http_json("POST", router + "/v1/completions",
                                    {"model": "mock-model", "prompt": [1, 2, 3], "max_tokens": 2})
        err = json.loads(body)["error"]
        check(status == 502 and "failed" in err["message"] and err["type"] == "server_error",
              f"a dead decode worker before the first byte is a 502 ({err['message']})")
        poll(lambda: active_blocks_zero(router, [p, d]), "active blocks back to 0")

    with Processes() as procs:
        _, p = start_engine(procs, ENGINE, "lonely-prefill", "--role", "prefill", "--pd-protocol",
                            "vllm-nixl")
        _, d = start_engine(procs, ENGINE, "sglang-decode", "--role", "decode", "--pd-protocol",
                            "sglang-bootstrap")
        pflag = worker_flag(p) + ",disagg_mode=prefill,disagg_protocol=vllm-nixl"
        dflag = worker_flag(d) + ",disagg_mode=decode,disagg_protocol=sglang-bootstrap"
        _, only_prefill = start_router(procs, ROUTER, [pflag], name="router-prefill-only")
        status, body, _ = http_json("POST", only_prefill + "/v1/completions",
                                    {"model": "mock-model", "prompt": [1, 2], "max_tokens": 1})
        check(status == 503 and json.loads(body)["error"]["message"].startswith(
            "no decode worker available for this model"), "only a prefill pool: 503 naming it")
        _, mismatch = start_router(procs, ROUTER, [pflag, dflag], name="router-mismatch")
        status, body, _ = http_json("POST", mismatch + "/v1/completions",
                                    {"model": "mock-model", "prompt": [1, 2], "max_tokens": 1})
        check(status == 501 and "different PD protocols" in json.loads(body)["error"]["message"],
              "prefill and decode protocols that disagree: 501")
        check(debug_requests(p) == [] and debug_requests(d) == [], "no leg was sent")


def main():
    for protocol in ("sglang-bootstrap", "vllm-nixl", "vllm-mooncake"):
        test_protocol(protocol)
    test_failures()
    print("all PD router tests passed")


if __name__ == "__main__":
    main()
