#!/usr/bin/python3
"""Kubernetes discovery end to end (issue 26, part 4; doc/discovery.md §3): the real
infera-router with `--discovery-backend kubernetes` and in-cluster credentials (the
service-account files and KUBERNETES_SERVICE_HOST/PORT a Pod gets), the real
infera-register --k8s, real mock engines, against the test API server
(tests/integration/discovery/kube_apiserver.py, whose fidelity discovery_kube_fidelity
checks with kubectl and the Python client) over HTTPS with a bearer token.

1. Join: three annotated Running Pods matching the selector become workers (one
   annotated by infera-register --k8s, two as Infera's workers write it); a request is
   served through one; a Pod outside the selector and a Pending Pod are not workers,
   and the Pending one joins once Running.
2. deletionTimestamp: a graceful delete takes the worker out while its Pod still
   exists.
3. Leave: SIGTERM on infera-register removes its annotation and the worker; a new
   sidecar brings it back.
4. 410 relist: a Pod vanishes with its DELETED event compacted away; the open watch
   ends with 410 Gone, the router lists again and drops it. Bookmarks arrive on the
   watch (debug lines of the discovery_k8s logger).
Usage: kubernetes_discovery_test.py BUILD_DIR
"""
import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "discovery"))
import kube_apiserver  # noqa: E402
from harness import (Processes, binaries, check, http, poll,  # noqa: E402
                     start_engine)

BUILD = sys.argv[1]
_, ENGINE, ROUTER = binaries(BUILD)
REGISTER = os.path.join(BUILD, "apps/infera-register/infera-register")
NS, TOKEN, SELECTOR = "infera", "sa-token", "app=infera-fleet"
ANNOTATION = "infera.amd.com/worker-info"


class Api:
    """The Kubernetes API as a client calls it (HTTPS, bearer token)."""

    def __init__(self, port, ca):
        self.base = f"https://127.0.0.1:{port}"
        self.ctx = ssl.create_default_context(cafile=ca)

    def call(self, method, path, body=None, content_type="application/json"):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {TOKEN}",
                                              "Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ctx) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def pod(self, name, labels, phase="Running", annotation=None):
        status, _ = self.call("POST", f"/api/v1/namespaces/{NS}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "engine", "image": "vllm"}]}})
        assert status == 201, status
        if annotation is not None:
            self.annotate(name, annotation)
        if phase != "Pending":
            self.phase(name, phase)

    def annotate(self, name, value):
        status, _ = self.call("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}",
                              {"metadata": {"annotations": {ANNOTATION: value}}},
                              "application/merge-patch+json")
        assert status == 200, status

    def phase(self, name, phase):
        status, _ = self.call("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status",
                              {"status": {"phase": phase}}, "application/merge-patch+json")
        assert status == 200, status


def infera_payload(port, events, model="mock-model"):
    """The record as Infera's workers write it (infera/common/registration.py
    build_worker_payload): no kv_replay_endpoint, disagg_meta may be null, and a
    request_transport field."""
    return json.dumps({"worker_id": f"127.0.0.1:{port}", "url": f"http://127.0.0.1:{port}",
                       "model_name": model, "engine": "vllm", "disagg_mode": "mixed",
                       "disagg_meta": None, "kv_events_endpoint": events, "kv_block_size": 16,
                       "dp_rank": 0, "dp_size": 1, "request_transport": "http"})


def main():
    d = tempfile.mkdtemp(prefix="infera-k8s-")
    try:
        ca, cert, key = kube_apiserver.make_test_tls(d)
        server = kube_apiserver.Server(0, token=TOKEN, tls_cert=cert, tls_key=key,
                                       bookmark_interval_s=0.2).start()
        sa = os.path.join(d, "sa")
        os.makedirs(sa)
        for name, text in (("token", TOKEN + "\n"), ("namespace", NS)):
            with open(os.path.join(sa, name), "w") as f:
                f.write(text)
        shutil.copy(ca, os.path.join(sa, "ca.crt"))
        with Processes() as procs:
            run(procs, Api(server.port, ca), server, sa)
        server.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("kubernetes discovery OK", flush=True)


def run(procs, api, server, sa):
    engines = [start_engine(procs, ENGINE, f"engine{i}")[1] for i in range(3)]
    ids = [f"127.0.0.1:{e['port']}" for e in engines]
    register_argv = [REGISTER, "--k8s", "--k8s-pod", "w0", "--k8s-namespace", NS,
                     "--k8s-api-server", api.base, "--k8s-token-file", os.path.join(sa, "token"),
                     "--k8s-ca-file", os.path.join(sa, "ca.crt"), "--k8s-refresh-s", "30",
                     "--url", f"http://{ids[0]}", "--model-name", "mock-model",
                     "--kv-events-endpoint", engines[0]["events"],
                     "--kv-replay-endpoint", engines[0]["replay"]]
    fleet = {"app": "infera-fleet"}
    api.pod("w0", fleet)  # its sidecar writes the annotation
    register = procs.start("register", register_argv)
    api.pod("w1", fleet, annotation=infera_payload(engines[1]["port"], engines[1]["events"]))
    api.pod("w2", fleet, annotation=infera_payload(engines[2]["port"], engines[2]["events"]))
    api.pod("other", {"app": "unrelated"}, annotation=infera_payload(1, ""))
    api.pod("pending", fleet, phase="Pending", annotation=infera_payload(2, ""))

    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1",
               KUBERNETES_SERVICE_PORT=str(server.port))
    router = procs.start("router", [ROUTER, "--host", "127.0.0.1", "--port", "0",
                                    "--kv-events-topic", "kv-events",
                                    "--discovery-backend", "kubernetes",
                                    "--k8s-label-selector", SELECTOR,
                                    "--k8s-service-account-dir", sa,
                                    "--log-level", "info,discovery_k8s=debug"], env=env)
    port = router.wait_line(r"infera-router listening on \S*:(\d+)").group(1)
    base = f"http://127.0.0.1:{port}"

    def workers():
        status, body, _ = http("GET", base + "/v1/workers")
        return sorted(w["worker_id"] for w in json.loads(body)["workers"]) if status == 200 else []

    # 1. Join.
    poll(lambda: workers() == sorted(ids), "the three annotated Running Pods are the workers")
    status, body, headers = http("POST", base + "/v1/chat/completions", {
        "model": "mock-model", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    check(status == 200 and headers.get("X-Infera-Worker-Id") in ids,
          f"a request is served by a discovered worker ({status})")
    check("127.0.0.1:1" not in workers() and "127.0.0.1:2" not in workers(),
          "a Pod outside the selector and a Pending Pod are no workers")
    api.phase("pending", "Running")
    poll(lambda: "127.0.0.1:2" in workers(), "the Pending Pod joins once Running")

    # 2. deletionTimestamp: out at once, while the Pod is still there.
    status, _ = api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/w1")
    check(status == 200, "graceful delete of w1")
    poll(lambda: ids[1] not in workers(), "w1 leaves the moment it has a deletionTimestamp")
    status, pod = api.call("GET", f"/api/v1/namespaces/{NS}/pods/w1")
    check(status == 200 and pod["metadata"].get("deletionTimestamp"),
          "... while its Pod still exists (terminating)")

    # 3. Leave and rejoin through infera-register --k8s.
    register.p.send_signal(signal.SIGTERM)
    check(register.p.wait(30) == 0, "infera-register exits 0 on SIGTERM")
    poll(lambda: ids[0] not in workers(), "w0 leaves when its sidecar removes the annotation")
    status, pod = api.call("GET", f"/api/v1/namespaces/{NS}/pods/w0")
    check(ANNOTATION not in (pod["metadata"].get("annotations") or {}),
          "the annotation is gone from the Pod")
    register = procs.start("register2", register_argv)
    poll(lambda: ids[0] in workers(), "a new sidecar brings w0 back")

    # 4. 410 Gone: w2's deletion is compacted away; the watch must relist to see it.
    lists_before = len(router.grep(r"k8s discovery: \(re\)list"))
    status, _ = api.call("POST", f"/_test/silent-delete?namespace={NS}&name=w2")
    check(status == 200, "w2 deleted with its event compacted away")
    poll(lambda: ids[2] not in workers(), "w2 leaves after the 410 relist")
    check(router.grep(r"is gone \(410") and
          len(router.grep(r"k8s discovery: \(re\)list")) > lists_before,
          "the router saw 410 Gone and listed again")
    check(workers() == sorted([ids[0], "127.0.0.1:2"]), f"the fleet is w0 and pending: "
                                                        f"{workers()}")
    poll(lambda: router.grep(r"k8s discovery: bookmark at resourceVersion \d+"),
         "bookmarks arrive on the watch")
    router.p.terminate()
    check(router.p.wait(30) == 0, "the router exits 0 on SIGTERM")


if __name__ == "__main__":
    main()
