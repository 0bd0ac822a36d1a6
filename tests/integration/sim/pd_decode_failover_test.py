#!/usr/bin/python3
"""PD decode failover (issue 23; doc/pd.md §6): the decode worker the router picked is
killed (SIGKILL) after the prefill leg and before its first byte, and the client still
gets its whole answer, from the other decode worker.

For each protocol (sglang-bootstrap, vllm-nixl, vllm-mooncake): one prefill and two
decode infera-mock-engines, the real infera-router at its default flags. The decode
engines move KV slowly (--kv-transfer-gbps 0.15 at --speedup 1: 1.4 s for the
199-token prompt), so the request sits on its decode worker between the prefill's
answer and the first byte; the test polls until the prefill holds the KV and one decode engine has the decode
leg, kills that engine, and then checks the client's answer (status 200, every token,
finish_reason length, no error event), that it came from the survivor, that the prefill
leg went again (the KV hand-off died with the victim), and that the router's gauges
(in-flight requests, active blocks) are back to 0. Streamed for the concurrent
protocols, not streamed for vllm-nixl (serial), so both answer paths are covered.
Usage: pd_decode_failover_test.py BUILD_DIR
"""
import http.client
import json
import os
import re
import sys
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, debug_requests, http as http_json, metric, poll, start_engine, start_router, worker_flag  # noqa: E402,E501

BUILD = sys.argv[1]
ENGINE = os.path.join(BUILD, "apps/infera-mock-engine/infera-mock-engine")
ROUTER = os.path.join(BUILD, "apps/infera-router/infera-router")
PROMPT = list(range(1, 200))
MAX_TOKENS = 12


def url(fields):
    return f"http://127.0.0.1:{fields['port']}"


def fleet(procs, protocol):
    """One prefill and two decode engines of `protocol`; their --worker flags."""
    common = ["--num-gpu-blocks", "2048", "--pd-protocol", protocol]
    engine_id = f"engine-{protocol}"
    _, p = start_engine(procs, ENGINE, f"{protocol}-prefill", "--role", "prefill", "--speedup",
                        "20", "--engine-id", engine_id, *common)
    pflag = worker_flag(p) + f",disagg_mode=prefill,disagg_protocol={protocol}"
    if protocol == "sglang-bootstrap":
        pflag += f",bootstrap_host=127.0.0.1,bootstrap_port={p['bootstrap']}"
    if protocol == "vllm-mooncake":
        pflag += f",bootstrap_addr=127.0.0.1:{p['bootstrap']},engine_id={engine_id}"
    decodes = [start_engine(procs, ENGINE, f"{protocol}-decode{i}", "--role", "decode",
                            "--kv-transfer-gbps", "0.15", *common)
               for i in range(2)]
    flags = [pflag] + [worker_flag(d) + f",disagg_mode=decode,disagg_protocol={protocol}"
                       for _, d in decodes]
    return p, decodes, flags


def send(router, stream, out):
    """POSTs the completion; fills out = {status, headers, body}."""
    port = int(router.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = {"model": "mock-model", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out.update(status=resp.status, worker=resp.getheader("X-Infera-Worker-Id"),
               body=resp.read().decode())
    conn.close()


def check_answer(protocol, stream, out):
    check(out.get("status") == 200, f"{protocol}: the client's answer is 200 ({out})")
    if stream:
        events = [e[len("data: "):] for e in out["body"].split("\n\n") if e.strip()]
        check(events[-1] == "[DONE]" and not any('"error"' in e for e in events),
              f"{protocol}: the stream ends with [DONE] and carries no error event")
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
        usage = chunks[-1]["usage"]
    else:
        answer = json.loads(out["body"])
        text = answer["choices"][0]["text"]
        finish = answer["choices"][0]["finish_reason"]
        usage = answer["usage"]
    # Mooncake's decode leg asks max_tokens - 1 (doc/pd.md §3), as without a failover.
    tokens = MAX_TOKENS - 1 if protocol == "vllm-mooncake" else MAX_TOKENS
    check(finish == "length" and usage["completion_tokens"] == tokens and
          usage["prompt_tokens"] == len(PROMPT) and text,
          f"{protocol}: the whole answer ({tokens} tokens, finish_reason length; {usage})")


def test_protocol(protocol, stream):
    with Processes() as procs:
        p, decodes, flags = fleet(procs, protocol)
        _, router = start_router(procs, ROUTER, flags)
        out = {}
        client = threading.Thread(target=send, args=(router, stream, out))
        client.start()

        # After the prefill leg (the KV is held), before the decode's first byte (its
        # transfer takes 1.4 s): the decode engine that has the leg is the victim.
        def victim():
            if (metric(url(p), "infera_mock_pd_kv_held_total") or 0) < 1:
                return None
            got = [i for i, (_, d) in enumerate(decodes) if debug_requests(d)]
            return got[0] if len(got) == 1 else None
        poll(lambda: victim() is not None,
             f"{protocol}: the prefill holds the KV and one decode engine has the leg")
        v = victim()
        vproc, vfields = decodes[v]
        _, survivor = decodes[1 - v]
        check(metric(url(vfields), "infera_mock_pd_kv_received_total") == 0,
              f"{protocol}: the victim has not finished its KV transfer (no byte answered)")
        vproc.p.kill()
        vproc.p.wait()
        client.join(timeout=120)
        check(not client.is_alive(), f"{protocol}: the client got an answer")
        check_answer(protocol, stream, out)
        sid = f"127.0.0.1:{survivor['port']}"
        check(out["worker"] == sid, f"{protocol}: answered by the survivor {sid} ({out})")
        check(len(debug_requests(survivor)) == 1 and
              metric(url(survivor), "infera_mock_pd_kv_received_total") == 1,
              f"{protocol}: the survivor got one decode leg and its KV")
        pre = debug_requests(p)
        check(len(pre) == 2, f"{protocol}: the prefill leg went again for the new pair")
        if protocol == "vllm-mooncake":
            tids = [b["kv_transfer_params"]["transfer_id"] for b in pre]
            check(tids[1] == tids[0] + "-1", f"{protocol}: the new pair's own transfer id {tids}")
        if protocol == "sglang-bootstrap":
            check(pre[0]["bootstrap_room"] != pre[1]["bootstrap_room"],
                  f"{protocol}: the new pair's own bootstrap room")
        check(metric(router, f'infera_router_failovers_total{{worker_id="{sid}"}}') == 1,
              f"{protocol}: one failover, counted on the survivor")
        workers = [p, vfields, survivor]

        def gauges_zero():
            _, m, _ = http_json("GET", router + "/metrics")
            inflight = re.search(r"^infera_request_inflight\{[^}]*\} (\S+)$", m, re.M)
            if inflight is None or float(inflight.group(1)) != 0:
                return False
            return all(metric(router, f'infera_policy_active_blocks{{worker_id="127.0.0.1:'
                                      f'{f["port"]}"}}') == 0 for f in workers)
        poll(gauges_zero, f"{protocol}: in-flight requests and active blocks back to 0")
        print(f"{protocol}: decode killed before its first byte, answered by {sid}", flush=True)


def main():
    test_protocol("sglang-bootstrap", stream=True)
    test_protocol("vllm-nixl", stream=False)
    test_protocol("vllm-mooncake", stream=True)
    print("all PD decode failover tests passed")


if __name__ == "__main__":
    main()
