#!/usr/bin/python3
"""Every key `infera-router --help` names for --worker is accepted (issue 26, part 2).

The help text is parsed, not copied: every `key=` of its example and every key of its
`keys:` list (with `(or alias)` spellings) is given to a real router, one --worker flag
per key, and each worker must appear on /v1/workers with the value given. A key the
help names and this test has no sample value for fails the test, so help and parser
cannot drift apart unnoticed; an unknown key is refused with exit 2.
Usage: worker_flag_keys_test.py BUILD_DIR
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, binaries, check, fail, http, poll  # noqa: E402

BUILD = sys.argv[1]
_, _, ROUTER = binaries(BUILD)

# A sample value per key, and how /v1/workers shows it (a path into the worker object).
SAMPLES = {
    "worker_id": ("wid-{i}", ["worker_id"], "wid-{i}"),
    "model_name": ("model-{i}", ["model_name"], "model-{i}"),
    "model": ("model-{i}", ["model_name"], "model-{i}"),
    "engine": ("sglang", ["engine"], "sglang"),
    "disagg_mode": ("mixed", ["disagg_mode"], "mixed"),
    "kv_events_endpoint": ("tcp://127.0.0.1:9", ["kv_events_endpoint"], "tcp://127.0.0.1:9"),
    "kv_replay_endpoint": ("tcp://127.0.0.1:9", ["kv_replay_endpoint"], "tcp://127.0.0.1:9"),
    "disagg_protocol": ("vllm-nixl", ["disagg_meta", "protocol"], "vllm-nixl"),
    "kv_block_size": ("32", ["kv_block_size"], 32),
    "dp_rank": ("0", ["dp_rank"], 0),
    "dp_size": ("2", ["dp_size"], 2),
    "num_gpu_blocks": ("1234", ["num_gpu_blocks"], 1234),
    "bootstrap_host": ("10.1.2.3", ["disagg_meta", "params", "bootstrap_host"], "10.1.2.3"),
    "bootstrap_port": ("8998", ["disagg_meta", "params", "bootstrap_port"], 8998),
    "bootstrap_addr": ("10.1.2.3:8998", ["disagg_meta", "params", "bootstrap_addr"],
                       "10.1.2.3:8998"),
    "engine_id": ("engine-{i}", ["disagg_meta", "params", "engine_id"], "engine-{i}"),
    "request_transport": ("nats", ["request_transport"], "nats"),
}


def help_keys():
    with Processes() as procs:
        rc, out = procs.run("help", [ROUTER, "--help"], timeout=60)
    check(rc == 0, "infera-router --help exits 0")
    # The --worker option's description runs until the next option line.
    m = re.search(r"^\s*--worker(?![\w-])(.*?)(?=^\s*-{1,2}\w)", out, re.M | re.S)
    if not m:
        fail("--help has no --worker entry")
    text = " ".join(m.group(1).split())
    listed = text.split("keys:", 1)
    if len(listed) != 2 or "e.g." not in listed[0]:
        fail(f"--worker help has no example and key list: {text}")
    keys = set(re.findall(r",(\w+)=", listed[0].split("e.g.", 1)[1]))  # the example's keys
    for item in listed[1].split(","):
        item = item.strip().rstrip(".")
        km = re.fullmatch(r"(\w+)(?: \(or (\w+)\))?", item)
        if not km:
            fail(f"--worker help: cannot read key item {item!r}")
        keys.update(k for k in km.groups() if k)
    print("--help names --worker keys:", " ".join(sorted(keys)), flush=True)
    return sorted(keys)


def main():
    keys = help_keys()
    missing = [k for k in keys if k not in SAMPLES]
    if missing:
        fail(f"--help names keys this test has no sample for: {missing}")
    check("model" in keys and "model_name" in keys, "--help names model and model_name")
    flags, expect = [], {}
    for i, key in enumerate(keys):
        value, path, shown = SAMPLES[key]
        url = f"http://127.0.0.1:{20000 + i}"
        flag = f"{url},{key}={value.format(i=i)}"
        if key != "worker_id":
            flag += f",worker_id=w{i}"
        flags += ["--worker", flag]
        wid = f"wid-{i}" if key == "worker_id" else f"w{i}"
        expect[wid] = (key, path, shown.format(i=i) if isinstance(shown, str) else shown)
    with Processes() as procs:
        router = procs.start("router", [ROUTER, "--host", "127.0.0.1", "--port", "0", *flags])
        port = router.wait_line(r"infera-router listening on \S*:(\d+)").group(1)
        workers = poll(lambda: [w for w in json.loads(
            http("GET", f"http://127.0.0.1:{port}/v1/workers")[1])["workers"]],
            "the router lists its workers")
        by_id = {w["worker_id"]: w for w in workers}
        for wid, (key, path, shown) in expect.items():
            v = by_id.get(wid)
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            check(v == shown, f"--worker ...,{key}=...: /v1/workers shows {shown!r} (got {v!r})")
        rc, out = procs.run("unknown-key", [ROUTER, "--port", "0", "--worker",
                                            "http://127.0.0.1:1,colour=red"], timeout=60)
        check(rc == 2 and "unknown key 'colour'" in out, "an unknown key: exit 2, named")
    print("worker flag keys OK", flush=True)


if __name__ == "__main__":
    main()
