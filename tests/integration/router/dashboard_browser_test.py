#!/usr/bin/python3
"""GET /dashboard in a real browser (Debian's chromium, headless, puppeteer-core) against
infera-router and three infera-mock-engine processes under traffic: no console error,
every target shown, numbers changing as traffic flows; writes a screenshot.

Usage: dashboard_browser_test.py --router BIN --engine BIN --node-modules DIR
       --scripts DIR --screenshot PNG [--chromium /usr/bin/chromium]
"""
import json
import os
import subprocess
import sys
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, http, parse_flags, start_engine, start_router, worker_flag  # noqa: E402,E501

ARGS = parse_flags("router", "engine", "node-modules", "scripts", "screenshot",
                   chromium="/usr/bin/chromium")


def traffic(base, stop, seed):
    """Conversations that grow turn by turn (shared prefixes: cache hits), streamed
    (time to first byte), until `stop` is set."""
    turn = 0
    while not stop.is_set():
        conversation = seed * 1000 + (turn // 6) % 4
        prompt = [conversation % 50000 + 1] * 16 + list(range(1, 33 + 16 * (turn % 6)))
        status, _, _ = http("POST", base + "/v1/completions",
                            {"model": "mock-model", "prompt": prompt, "max_tokens": 16,
                             "stream": turn % 2 == 0})
        if status != 200:
            print("traffic: status", status, flush=True)
        turn += 1


with Processes() as procs:
    engines = [start_engine(procs, ARGS.engine, f"engine{i}", "--speedup", "4")[1]
               for i in range(3)]
    _, base = start_router(procs, ARGS.router, [worker_flag(f) for f in engines])
    names = [f"127.0.0.1:{e['port']}" for e in engines]
    stop = threading.Event()
    clients = [threading.Thread(target=traffic, args=(base, stop, i), daemon=True)
               for i in range(4)]
    for c in clients:
        c.start()
    try:
        env = dict(os.environ, NODE_MODULES=ARGS.node_modules, CHROMIUM=ARGS.chromium,
                   DASHBOARD_URL=base + "/dashboard", TARGETS=json.dumps(names),
                   SCREENSHOT=ARGS.screenshot)
        if os.environ.get("SCREENSHOT_PHONE"):
            env["SCREENSHOT_PHONE"] = os.environ["SCREENSHOT_PHONE"]
        run = subprocess.run(["node", os.path.join(ARGS.scripts, "dashboard_browser.mjs")],
                             env=env, capture_output=True, text=True, timeout=120)
        print(run.stdout, run.stderr, flush=True)
        check(run.returncode == 0, "the browser's checks passed")
    finally:
        stop.set()
        for c in clients:
            c.join(timeout=30)
    check(os.path.getsize(ARGS.screenshot) > 10000, "the screenshot is a picture")
    f = json.loads(http("GET", base + "/v1/admin/fleet")[1])
    check(f["totals"]["hit_rate_1m"] is not None and f["totals"]["hit_rate_1m"] > 0,
          f"the traffic hit the cache (fleet hit rate {f['totals']['hit_rate_1m']:.2f})")
print("dashboard_browser_test: all passed")
