#!/usr/bin/python3
"""The admin token (doc/router.md "Admin token") on a real router with a mock engine.

--admin-token-file: each protected path (/v1/workers, /v1/admin/*, /dashboard; /metrics
with --protect-metrics) answers 401 without the token, with a wrong one and with another
scheme, in OpenAI's error shape with WWW-Authenticate: Bearer, and serves with it;
/health, /ready, /v1/models, /metrics and the inference API stay open; neither the log
(at trace level) nor an answer carries the token. INFERA_ADMIN_TOKEN with
--protect-metrics. Without a token: today's behaviour (open), and a start-up warning
when the listen address is not loopback. Bad token settings exit 2 without echoing them.
Usage: admin_auth_test.py --router BIN --engine BIN
"""
import json
import os
import secrets
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, http, parse_flags, poll, start_engine, worker_flag  # noqa: E402

ARGS = parse_flags("router", "engine")


def start(procs, name, worker, *extra, env=None, token=None):
    """A router on 127.0.0.1:0 with one static worker; returns (Proc, base) once /ready
    is 200 and it lists the worker (asked with `token` when given)."""
    proc = procs.start(name, [ARGS.router, "--port", "0", "--kv-events-topic", "kv-events",
                              "--worker", worker, *extra], env=env)
    port = proc.wait_line(r"infera-router listening on \S*:(\d+)").group(1)
    base = f"http://127.0.0.1:{port}"
    poll(lambda: http("GET", base + "/ready")[0] == 200, f"{name}: /ready 200 (open)")
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    status, body, _ = http("GET", base + "/v1/workers", headers=auth)
    check(status == 200 and len(json.loads(body)["workers"]) == 1, f"{name}: lists its worker")
    return proc, base


def check_401(base, method, path, headers, what):
    status, body, h = http(method, base + path, body={} if method == "POST" else None,
                           headers=headers)
    check(status == 401, f"{method} {path} {what}: 401 ({status})")
    err = json.loads(body)
    check(set(err) == {"error"} and err["error"]["type"] == "invalid_request_error" and
          err["error"]["code"] == "invalid_api_key" and err["error"]["param"] is None and
          "--admin-token" in err["error"]["message"],
          f"{method} {path} {what}: OpenAI's error shape ({body})")
    challenge = h.get("WWW-Authenticate", "")
    check(challenge.startswith("Bearer realm=\"infera-router\""),
          f"{method} {path} {what}: WWW-Authenticate: {challenge}")
    check(("invalid_token" in challenge) == bool(headers.get("Authorization")),
          f"{method} {path} {what}: error=\"invalid_token\" only when credentials came")
    check(h.get("X-Infera-Request-Id"), f"{method} {path} {what}: a request id")
    return body


def main():
    with Processes() as procs:
        _, fields = start_engine(procs, ARGS.engine, "engine", "--speedup", "20")
        worker = worker_flag(fields)
        worker_id = f"127.0.0.1:{fields['port']}"
        token = "adm-" + secrets.token_urlsafe(24)
        token_file = os.path.join(procs.dir, "admin-token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        # Trace level: whatever the router logs about requests, the token is not in it.
        proc, base = start(procs, "router", worker, "--host", "127.0.0.1", "--admin-token-file",
                           token_file, "--log-level", "trace", token=token)
        good = {"Authorization": f"Bearer {token}"}
        wrong = ({"Authorization": f"Bearer {token}x"}, {"Authorization": f"Bearer {token[:-1]}"},
                 {"Authorization": f"Basic {token}"}, {"Authorization": token},
                 {"Authorization": "Bearer"})
        # /v1/admin/fleet and /dashboard come with the dashboard (issue 24): the guard is
        # by prefix, so they are protected whether or not this build serves them.
        protected = ["/v1/workers", f"/v1/admin/cache-view/{worker_id}", "/v1/admin/fleet",
                     "/dashboard", "/v1/admin/nothing-here"]
        bodies = []
        for path in protected:
            bodies.append(check_401(base, "GET", path, {}, "without a token"))
            for h in wrong:
                bodies.append(check_401(base, "GET", path, h, f"with {h['Authorization'][:6]}..."))
        bodies.append(check_401(base, "POST", "/v1/workers", {}, "(a 405 path) without a token"))
        check(all(token not in b for b in bodies), "no 401 body carries the token")
        status, body, _ = http("GET", base + "/v1/workers", headers=good)
        check(status == 200 and json.loads(body)["workers"][0]["worker_id"] == worker_id,
              "GET /v1/workers with the token: 200")
        status, body, _ = http("GET", base + f"/v1/admin/cache-view/{worker_id}",
                               headers={"Authorization": f"bearer   {token}"})
        check(status == 200 and json.loads(body)["worker_id"] == worker_id,
              "GET /v1/admin/cache-view with the token (scheme in lower case): 200")
        for path in ("/v1/admin/fleet", "/dashboard"):
            status = http("GET", base + path, headers=good)[0]
            check(status == 200, f"GET {path} with the token: 200 ({status})")
        # A browser opening the dashboard (Accept: text/html, no header): the 401 is a
        # page that reads #token= and fetches /dashboard with it; no fleet data in it.
        status, body, h = http("GET", base + "/dashboard",
                               headers={"Accept": "text/html,application/xhtml+xml"})
        check(status == 401 and h.get("Content-Type", "").startswith("text/html") and
              "#token=" in body and "Bearer" in body and worker_id not in body and
              h.get("WWW-Authenticate", "").startswith("Bearer"),
              "GET /dashboard from a browser without the token: 401, the token page")
        for path in ("/health", "/ready", "/metrics", "/v1/models"):
            check(http("GET", base + path)[0] == 200, f"GET {path} open: 200")
        status, _, _ = http("POST", base + "/v1/completions",
                            {"model": "mock-model", "prompt": list(range(1, 40)), "max_tokens": 2},
                            headers={"Authorization": "Bearer a-client-api-key"})
        check(status == 200, "the inference API is open (the client's own key passes through)")
        log = proc.output()
        check("admin token set" in log and token not in log,
              "the router logs that a token is set, never the token")
        check("no admin token" not in log, "no open-admin warning with a token")

        # INFERA_ADMIN_TOKEN and --protect-metrics; the default host (0.0.0.0) is fine
        # with a token: no warning.
        env_token = "env-" + secrets.token_hex(16)
        env = dict(os.environ, INFERA_ADMIN_TOKEN=env_token)
        proc2, base2 = start(procs, "router-env", worker, "--protect-metrics", env=env, token=env_token)
        check_401(base2, "GET", "/metrics", {}, "with --protect-metrics, without a token")
        check_401(base2, "GET", "/metrics", {"Authorization": f"Bearer {token}"},
                  "with --protect-metrics, another router's token")
        status, page, _ = http("GET", base2 + "/metrics",
                               headers={"Authorization": f"Bearer {env_token}"})
        check(status == 200 and "infera_router_ready 1" in page,
              "GET /metrics with INFERA_ADMIN_TOKEN's token: 200")
        for path in ("/health", "/ready"):
            check(http("GET", base2 + path)[0] == 200, f"{path} stays open with --protect-metrics")
        check(env_token not in proc2.output() and "no admin token" not in proc2.output(),
              "env token: not logged, no warning")

        # No token: today's behaviour, and the warning when not on loopback.
        proc3, base3 = start(procs, "router-open", worker)  # --host default: 0.0.0.0
        check(http("GET", base3 + "/v1/workers")[0] == 200, "no token: /v1/workers open")
        check(http("GET", base3 + "/metrics")[0] == 200, "no token: /metrics open")
        check(proc3.grep(r"\[warning\].*no admin token and listening on 0\.0\.0\.0"),
              "no token on 0.0.0.0: a start-up warning")
        proc4, _ = start(procs, "router-loopback", worker, "--host", "127.0.0.1")
        check(not proc4.grep("no admin token"), "no token on 127.0.0.1: no warning")

        # Bad settings: exit 2, the value not echoed.
        bad_file = os.path.join(procs.dir, "bad-token")
        with open(bad_file, "w") as f:
            f.write("two words\n")
        for name, extra, env, expect in (
                ("spaces", ["--admin-token", "sec ret"], None, "visible ASCII"),
                ("empty", ["--admin-token", ""], None, "empty"),
                ("bad-file", ["--admin-token-file", bad_file], None, "visible ASCII"),
                ("no-file", ["--admin-token-file", bad_file + ".missing"], None, "cannot open"),
                ("protect-alone", ["--protect-metrics"], {"INFERA_ADMIN_TOKEN": ""},
                 "--protect-metrics needs an admin token"),
                ("both", ["--admin-token", "a", "--admin-token-file", token_file], None,
                 "only one of --admin-token and --admin-token-file")):
            rc, out = procs.run(f"bad-{name}", [ARGS.router, "--host", "127.0.0.1", "--port", "0",
                                                *extra], timeout=30,
                                env=dict(os.environ, **(env or {})))
            check(rc != 0 and expect in out, f"{name}: exit {rc}, '{expect}'")
            check("sec ret" not in out and "two words" not in out, f"{name}: the value is not echoed")
    print("admin_auth: PASS")


if __name__ == "__main__":
    main()
