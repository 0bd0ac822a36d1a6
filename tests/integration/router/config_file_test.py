#!/usr/bin/python3
"""--config FILE (doc/router.md "Configuration file") on a real router and mock engine.

The file's values take effect (policy, worker list, admin token, limits); a flag on the
command line overrides the file; the file overrides the environment; the example of
doc/router.md and of `--help` load as shipped (only addresses and paths adjusted) and
the router gets ready; an unknown key, a key set twice, malformed TOML, a value of the
wrong type and a missing file each exit non-zero with an error naming the line and key.
Usage: config_file_test.py --router BIN --engine BIN --doc doc/router.md
"""
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, check, http, parse_flags, poll, start_engine, worker_flag  # noqa: E402

ARGS = parse_flags("router", "engine", "doc")


def toml_string(s):
    return json.dumps(s)  # a JSON string of ASCII is a TOML basic string


def write(procs, name, text):
    path = os.path.join(procs.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def start(procs, name, config, *extra, env=None):
    """A router from `config`; returns (Proc, base, listening line's policy)."""
    proc = procs.start(name, [ARGS.router, "--config", config, *extra], env=env)
    m = proc.wait_line(r"infera-router listening on \S*:(\d+) policy=(\S+)")
    base = f"http://127.0.0.1:{m.group(1)}"
    poll(lambda: http("GET", base + "/ready")[0] == 200, f"{name}: /ready 200")
    return proc, base, m.group(2)


def example(text, worker, token_file):
    """An example config adjusted for this machine: the listen address, the worker list
    and the token file; a tokenizer path is dropped (the test has no model files)."""
    out = []
    skip_array = False
    for line in text.splitlines():
        if skip_array:
            skip_array = not line.rstrip().endswith("]")
            continue
        key = line.split("=", 1)[0].strip()
        if key == "host":
            line = 'host = "127.0.0.1"'
        elif key == "port":
            line = "port = 0"
        elif key == "router-tokenizer-path":
            continue
        elif key == "admin-token-file":
            line = f"admin-token-file = {toml_string(token_file)}"
        elif key == "worker":
            skip_array = not line.rstrip().endswith("]")
            line = f"worker = [{toml_string(worker)}]"
        out.append(line)
    return "\n".join(out) + "\n"


def main():
    with Processes() as procs:
        _, fields = start_engine(procs, ARGS.engine, "engine", "--speedup", "20")
        worker = worker_flag(fields)
        token_file = write(procs, "admin-token", "file-token-0123456789\n")

        # The file's values take effect.
        config = write(procs, "router.toml", f"""# a test configuration
host = "127.0.0.1"
port = 0
router-policy = "round-robin"   # not the default
worker = [
  {toml_string(worker)},  # the engine
]
kv-events-topic = "kv-events"
admin-token = "cfg-token-0123456789"
max-body-bytes = 1_000
ready-after-replay = true
""")
        env = dict(os.environ, INFERA_ADMIN_TOKEN="env-token-0123456789")
        proc, base, policy = start(procs, "router", config, env=env)
        check(policy == "round-robin", f"router-policy from the file ({policy})")
        status, body, _ = http("GET", base + "/v1/workers",
                               headers={"Authorization": "Bearer cfg-token-0123456789"})
        check(status == 200 and len(json.loads(body)["workers"]) == 1,
              "worker and admin-token from the file")
        status = http("GET", base + "/v1/workers",
                      headers={"Authorization": "Bearer env-token-0123456789"})[0]
        check(status == 401, f"the file overrides INFERA_ADMIN_TOKEN ({status})")
        status = http("POST", base + "/v1/completions",
                      {"model": "mock-model", "prompt": "x" * 2000, "max_tokens": 2})[0]
        check(status == 413, f"max-body-bytes from the file (2 kB body: {status})")
        status = http("POST", base + "/v1/completions",
                      {"model": "mock-model", "prompt": list(range(1, 40)), "max_tokens": 2})[0]
        check(status == 200, "a request routed")
        check(proc.grep(r"pick policy=round-robin"), "picks use the file's policy")
        check("cfg-token-0123456789" not in proc.output(), "the file's token is not logged")

        # The command line overrides the file.
        _, base2, policy = start(procs, "router-cli", config, "--router-policy", "least-load",
                                 "--admin-token-file", token_file)
        check(policy == "least-load", f"--router-policy on the command line wins ({policy})")
        status = http("GET", base2 + "/v1/workers",
                      headers={"Authorization": "Bearer file-token-0123456789"})[0]
        check(status == 200, f"--admin-token-file on the command line wins ({status})")

        # The examples of doc/router.md and --help load.
        doc = open(ARGS.doc).read()
        section = re.search(r"(?ms)^## Configuration file\n(.*?)(?=^## )", doc)
        check(section, "doc/router.md has a Configuration file section")
        doc_example = re.search(r"(?ms)^```toml\n(.*?)^```", section.group(1))
        check(doc_example, "it shows a TOML example")
        help_text = subprocess.run([ARGS.router, "--help"], capture_output=True, text=True,
                                   timeout=30).stdout
        help_example = re.search(r"(?ms)^  # /etc/infera-router/config.toml\n(.*?)\n\n",
                                 help_text + "\n\n")
        check(help_example, "--help shows an example file")
        help_toml = "\n".join(line[2:] for line in help_example.group(0).splitlines())
        check(help_toml.strip() == doc_example.group(1).strip(),
              "--help's example is doc/router.md's")
        path = write(procs, "example.toml", example(doc_example.group(1), worker, token_file))
        _, base3, policy = start(procs, "router-example", path)
        status = http("GET", base3 + "/v1/workers",
                      headers={"Authorization": "Bearer file-token-0123456789"})[0]
        check(policy == "kv-aware" and status == 200, "the doc's example serves")

        # Errors name the line and the key; the router exits non-zero.
        for name, text, expect in (
                ("unknown key", 'port = 0\nrouter-polcy = "kv-aware"\n',
                 "line 2: unknown key 'router-polcy': infera-router has no flag --router-polcy"),
                ("unquoted string", "port = 0\nrouter-policy = kv-aware\n",
                 "line 2: the value of 'router-policy' is not a TOML string"),
                ("unterminated string", 'host = "127.0.0.1\n',
                 "line 1: the value of 'host': the string is not closed"),
                ("table", '[router]\nport = 0\n', "line 1: tables ([name]) are not used"),
                ("twice", "port = 0\nport = 1\n", "line 2: 'port' is set twice"),
                ("array for a scalar", "port = [0, 1]\n", "line 1: 'port' takes one value"),
                ("not configurable", 'config = "x.toml"\n', "not allowed in a configuration file"),
                ("wrong type", 'port = "abc"\n', "--port")):
            path = write(procs, "bad.toml", text)
            rc, out = procs.run("bad-" + name.replace(" ", "-"),
                                [ARGS.router, "--config", path], timeout=30)
            check(rc != 0 and expect in out, f"{name}: exit {rc}, '{expect}' ({out.strip()})")
        rc, out = procs.run("missing", [ARGS.router, "--config", path + ".missing"], timeout=30)
        check(rc == 2 and "--config" in out and "bad.toml.missing" in out,
              f"a missing file: exit {rc} ({out.strip()})")
    print("config_file: PASS")


if __name__ == "__main__":
    main()
