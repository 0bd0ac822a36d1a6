#!/usr/bin/python3
"""GET /v1/admin/fleet's JSON shape, GET /dashboard, and --route-receipt's X-Infera-Route
header (absent by default; mixed and PD, both legs), against real infera-router and
infera-mock-engine processes (doc/operations.md "Dashboard", doc/router.md "Route
receipt").

Usage: fleet_view_test.py --router BIN --engine BIN
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, http, parse_flags, start_engine, start_router, worker_flag  # noqa: E402,E501

ARGS = parse_flags("router", "engine")
PROMPT = list(range(1, 101))  # 6 full blocks of 16
LEG_KEYS = ["role", "target", "policy", "cache_hits", "request_blocks", "cost", "w_overlap",
            "credited", "load", "candidates"]


def parse_receipt(value):
    """The header's legs as dicts (doc/router.md "Route receipt")."""
    legs = []
    for element in value.split(", "):
        pairs = [kv.split("=", 1) for kv in element.split(";")]
        check(all(len(p) == 2 for p in pairs), f"receipt element is key=value pairs: {element}")
        legs.append(dict(pairs))
    return legs


def engines(procs, n, *extra):
    return [start_engine(procs, ARGS.engine, f"engine{i}", "--speedup", "50", *extra)[1]
            for i in range(n)]


def complete(base, prompt=PROMPT, stream=False):
    return http("POST", base + "/v1/completions",
                {"model": "mock-model", "prompt": prompt, "max_tokens": 2, "stream": stream})


def test_default_and_fleet_shape():
    with Processes() as procs:
        fleet = engines(procs, 2)
        _, base = start_router(procs, ARGS.router, [worker_flag(f) for f in fleet])
        for _ in range(3):
            status, _, headers = complete(base)
            check(status == 200, "a completion through the router")
        check(not any(k.lower() == "x-infera-route" for k in headers),
              "no X-Infera-Route at the default flags")

        status, body, headers = http("GET", base + "/v1/admin/fleet")
        check(status == 200 and headers.get("Content-Type", "").startswith("application/json"),
              "GET /v1/admin/fleet answers JSON")
        f = json.loads(body)
        check(set(f) == {"now_ms", "totals", "events", "targets", "history", "last_picks"},
              "fleet JSON's top-level keys")
        names = sorted(t["target"] for t in f["targets"])
        check(names == sorted(f"127.0.0.1:{e['port']}" for e in fleet), "every target listed")
        target_keys = {"target", "worker_id", "dp_rank", "role", "model", "cached_blocks",
                       "cached_blocks_by_tier",
                       "hit_rate_1m", "hit_blocks_1m", "request_blocks_1m", "picks_1m",
                       "picks_per_s", "active_blocks", "pending_prefill_blocks",
                       "inflight_requests", "prefilling_requests", "breaker", "health",
                       "routable", "render_parity", "prediction_drifting",
                       "decode_demand_tokens", "decode_demand_requests"}
        check(all(set(t) == target_keys for t in f["targets"]), "every target's keys")
        picked = [t for t in f["targets"] if t["picks_1m"] > 0]
        check(all(set(t["cached_blocks_by_tier"]) == {"device", "host", "disk"} and
                  t["cached_blocks_by_tier"]["device"] <= t["cached_blocks"]
                  for t in f["targets"]), "cached blocks by tier")
        check(any(t["cached_blocks_by_tier"]["device"] > 0 for t in picked),
              "the picked target's view holds device blocks")
        check(sum(t["picks_1m"] for t in f["targets"]) == 3, "3 picks counted over the minute")
        # The same prompt three times: the 2nd and 3rd hit its 6 blocks (events permitting:
        # the view learns them from the engine's KV events, so at least the request blocks).
        check(all(t["request_blocks_1m"] >= 6 for t in picked), "request blocks counted")
        check(all(t["breaker"] == "closed" and t["health"] == "healthy" and t["routable"]
                  for t in f["targets"]), "breaker closed, healthy, routable")
        totals = f["totals"]
        check(totals["targets"] == 2 and totals["workers"] == 2 and totals["routable_workers"] == 2,
              "totals count the fleet")
        check(totals["pending_pick_guards"] == 0 and totals["active_blocks"] == 0,
              "idle: no pick guard or active block left")
        check(set(f["events"]) >= {"messages", "gaps", "replays", "resyncs", "idle_s"},
              "event counters")
        h = f["history"]
        check(all(len(h[k]) == 300 for k in ("t_s", "picks", "hit_rate", "ttft_ms", "inflight")),
              "300 seconds of history")
        check(sum(h["picks"]) == 3 and sum(h["ended"]) == 3, "the history counts 3 picks, 3 ends")
        check(any(v is not None and v > 0 for v in h["ttft_ms"]), "time to first byte recorded")
        check(len(f["last_picks"]) == 3, "3 receipts among the last picks")
        last = f["last_picks"][-1]
        check(last["policy"] == "kv-aware" and len(last["legs"]) == 1 and
              last["legs"][0]["candidates"] == 2 and last["legs"][0]["runner_up_cost"] is not None,
              "a receipt: kv-aware, one leg, 2 candidates, a runner-up cost")
        check(parse_receipt(last["header"])[0]["target"] == last["legs"][0]["target"],
              "the receipt's header form names the same target")
        check("prompt" not in json.dumps(f["last_picks"]), "no prompt in the receipts")

        # Bounded: 70 picks keep the last 64.
        for i in range(67):
            complete(base, prompt=[i + 1] * 20)
        f = json.loads(http("GET", base + "/v1/admin/fleet")[1])
        check(len(f["last_picks"]) == 64, "the last picks stay at 64 after 70 picks")

        status, page, headers = http("GET", base + "/dashboard")
        check(status == 200 and headers.get("Content-Type", "").startswith("text/html"),
              "GET /dashboard serves HTML")
        check("/v1/admin/fleet" in page and not re.search(r"(src|href)=\"?https?://", page),
              "the page polls /v1/admin/fleet and loads nothing from elsewhere")
        status, _, _ = http("POST", base + "/v1/admin/fleet", {})
        check(status == 405, "POST /v1/admin/fleet: 405")


def test_receipt_mixed():
    with Processes() as procs:
        fleet = engines(procs, 2)
        _, base = start_router(procs, ARGS.router, [worker_flag(f) for f in fleet],
                               "--route-receipt")
        complete(base)
        for stream in (False, True):
            status, body, headers = complete(base, stream=stream)
            check(status == 200, f"completion (stream={stream})")
            legs = parse_receipt(headers.get("X-Infera-Route", ""))
            check(len(legs) == 1 and all(k in legs[0] for k in LEG_KEYS),
                  f"X-Infera-Route has every field (stream={stream}): {legs}")
            leg = legs[0]
            check(leg["role"] == "mixed" and leg["target"] == headers.get("X-Infera-Worker-Id"),
                  "the receipt names the worker that answered")
            check(int(leg["request_blocks"]) == 6 and int(leg["candidates"]) == 2 and
                  "runner_up_cost" in leg, "request_blocks 6, 2 candidates, a runner-up cost")
            cost = float(leg["w_overlap"]) * (int(leg["request_blocks"]) - float(leg["credited"]))
            check(abs(cost + float(leg["load"]) - float(leg["cost"])) < 1e-3 * (1 + cost),
                  "cost = w_overlap x (request_blocks - credited) + load")
            check(float(leg["runner_up_cost"]) >= float(leg["cost"]),
                  "the runner-up costs no less than the winner")
        f = json.loads(http("GET", base + "/v1/admin/fleet")[1])
        check(f["last_picks"][-1]["header"] == headers["X-Infera-Route"],
              "the fleet view's last pick is the header's record")


def test_receipt_pd():
    with Processes() as procs:
        common = ["--num-gpu-blocks", "1024", "--pd-protocol", "vllm-nixl", "--pd-kv-wait-ms",
                  "5000", "--speedup", "20"]
        _, p = start_engine(procs, ARGS.engine, "prefill", "--role", "prefill", *common)
        _, d = start_engine(procs, ARGS.engine, "decode", "--role", "decode", *common)
        flags = [worker_flag(p) + ",disagg_mode=prefill,disagg_protocol=vllm-nixl",
                 worker_flag(d) + ",disagg_mode=decode,disagg_protocol=vllm-nixl"]
        _, base = start_router(procs, ARGS.router, flags, "--route-receipt")
        status, _, headers = complete(base, prompt=list(range(1, 301)))
        check(status == 200, "a PD completion")
        legs = parse_receipt(headers.get("X-Infera-Route", ""))
        check([leg["role"] for leg in legs] == ["prefill", "decode"],
              f"both legs in the receipt, prefill first: {headers.get('X-Infera-Route')}")
        check(legs[0]["target"] == f"127.0.0.1:{p['port']}" and
              legs[1]["target"] == f"127.0.0.1:{d['port']}", "each leg names its engine")
        check(all(all(k in leg for k in LEG_KEYS) for leg in legs), "every field on both legs")


test_default_and_fleet_shape()
test_receipt_mixed()
test_receipt_pd()
print("fleet_view_test: all passed")
