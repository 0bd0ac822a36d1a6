#!/usr/bin/python3
"""The test Kubernetes API server (kube_apiserver.py) against the real clients.

Kubernetes discovery is tested against kube_apiserver.py because no API server can run
here; this test is what makes that worth something: the real `kubectl` and the real
Python client (python3-kubernetes) must list, watch and patch through it exactly as
they do against a cluster. Over HTTPS with a bearer token (kubectl sends tokens only
over TLS), a CA made here with the `openssl` command.

kubectl: create, get with set- and equality-based selectors, annotate (merge patch),
patch --type json, patch of the status subresource, a watch that sees ADDED / MODIFIED
with increasing resourceVersions and a label change that takes the Pod out of the
selector as DELETED, delete (graceful: deletionTimestamp), a missing Pod (NotFound),
a bad token (Unauthorized).
Python client: list with a selector, patch_namespaced_pod (its strategic merge patch),
a watch from the list's resourceVersion with bookmarks (BOOKMARK events carry newer
versions), and a watch from a compacted version ends with 410 Gone as the client's
watch helper reports it (ApiException status 410).
Usage: kube_fidelity_test.py   (needs kubectl, python3-kubernetes, openssl)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kube_apiserver  # noqa: E402
from harness import check, fail  # noqa: E402

NS = "fidelity"
TOKEN = "fidelity-token"


class Kubectl:
    def __init__(self, port, ca, d):
        self.base = ["kubectl", f"--server=https://127.0.0.1:{port}", f"--token={TOKEN}",
                     f"--certificate-authority={ca}", "-n", NS]
        self.env = dict(os.environ, KUBECONFIG=os.path.join(d, "kubeconfig"))  # no user config
        open(self.env["KUBECONFIG"], "w").close()

    def run(self, *args, ok=True, token=None):
        argv = self.base + list(args)
        if token is not None:
            argv[2] = f"--token={token}"
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=self.env)
        if ok and r.returncode != 0:
            fail(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r

    def json(self, *args):
        return json.loads(self.run(*args, "-o", "json").stdout)


def pod_manifest(name, labels):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}]}}


def kubectl_checks(k, d):
    path = os.path.join(d, "w0.json")
    with open(path, "w") as f:
        json.dump(pod_manifest("w0", {"app": "vllm", "tier": "a"}), f)
    # Validation would fetch the OpenAPI schema, which this server does not serve.
    check("pod/w0 created" in k.run("create", "-f", path, "--validate=false").stdout,
          "kubectl create")
    with open(path, "w") as f:
        json.dump(pod_manifest("w1", {"app": "sglang"}), f)
    k.run("create", "-f", path, "--validate=false")
    names = lambda *sel: k.run("get", "pods", *sel, "-o", "name").stdout.split()  # noqa: E731
    check(names("-l", "app=vllm") == ["pod/w0"], "kubectl get -l app=vllm")
    check(names("-l", "app in (vllm,sglang),tier!=b") == ["pod/w0", "pod/w1"],
          "kubectl get with a set-based selector")
    check(names("-l", "!tier") == ["pod/w1"], "kubectl get -l '!tier'")

    # A watch running while kubectl changes the Pod (it lists, then watches from the
    # list's resourceVersion).
    watch = subprocess.Popen(k.base + ["get", "pods", "-l", "app=vllm", "-w", "-o", "json",
                                       "--output-watch-events"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=k.env)
    events = []
    reader = threading.Thread(target=lambda: events.extend(
        json.loads(line) for line in iter_json_objects(watch.stdout)), daemon=True)
    reader.start()
    deadline = time.time() + 20
    while not events and time.time() < deadline:
        time.sleep(0.05)
    check(events and events[0]["type"] == "ADDED", "kubectl -w: the current Pod as ADDED")
    k.run("annotate", "pod", "w0", 'infera.amd.com/worker-info={"url": "http://10.0.0.5:30000"}')
    k.run("patch", "pod", "w0", "--subresource=status", "--type=merge",
          "-p", '{"status": {"phase": "Running"}}')
    k.run("patch", "pod", "w0", "--type=json",
          "-p", '[{"op": "add", "path": "/metadata/labels/tier", "value": "b"}]')
    k.run("label", "pod", "w0", "app=other", "--overwrite")  # leaves the selector
    while len(events) < 5 and time.time() < deadline:
        time.sleep(0.05)
    watch.terminate()
    watch.wait(10)
    types = [e["type"] for e in events]
    check(types == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"],
          f"kubectl -w sees each change, and the label change out of the selector as "
          f"DELETED: {types}")
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    check(rvs == sorted(rvs) and len(set(rvs)) == len(rvs), f"resourceVersions increase: {rvs}")
    pod = k.json("get", "pod", "w0")
    check(pod["status"]["phase"] == "Running" and
          pod["metadata"]["annotations"]["infera.amd.com/worker-info"] ==
          '{"url": "http://10.0.0.5:30000"}' and pod["metadata"]["labels"] ==
          {"app": "other", "tier": "b"},
          "kubectl annotate, patch --type json, status patch and label all landed")
    k.run("delete", "pod", "w1", "--wait=false")
    check("deletionTimestamp" in k.json("get", "pod", "w1")["metadata"],
          "kubectl delete: graceful, the Pod carries a deletionTimestamp")
    missing = k.run("get", "pod", "nope", ok=False)
    check(missing.returncode != 0 and "NotFound" in missing.stderr, "kubectl: a missing Pod")
    denied = k.run("get", "pods", ok=False, token="wrong")
    check(denied.returncode != 0 and ("Unauthorized" in denied.stderr or
                                      "provide credentials" in denied.stderr),
          "kubectl with a wrong token is refused")


def iter_json_objects(stream):
    """kubectl -o json prints indented objects one after another: split them."""
    buf, depth = "", 0
    for line in stream:
        buf += line
        depth += line.count("{") - line.count("}")
        if depth == 0 and buf.strip():
            yield buf
            buf = ""


def python_checks(port, ca, server):
    from kubernetes import client, watch
    from kubernetes.client.rest import ApiException
    conf = client.Configuration(host=f"https://127.0.0.1:{port}",
                                api_key={"authorization": f"Bearer {TOKEN}"})
    conf.ssl_ca_cert = ca
    api = client.CoreV1Api(client.ApiClient(conf))
    api.create_namespaced_pod(NS, pod_manifest("p0", {"app": "vllm"}))
    listed = api.list_namespaced_pod(NS, label_selector="app=vllm")
    check([p.metadata.name for p in listed.items] == ["p0"], "python client: list with a selector")
    rv = listed.metadata.resource_version
    api.patch_namespaced_pod("p0", NS, {"metadata": {"annotations": {
        "infera.amd.com/worker-info": '{"url": "http://10.0.0.6:30000"}'}}})
    seen = []
    w = watch.Watch()
    for ev in w.stream(api.list_namespaced_pod, NS, label_selector="app=vllm",
                       resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=10):
        if ev["type"] == "BOOKMARK":
            seen.append(("BOOKMARK", int(ev["raw_object"]["metadata"]["resourceVersion"])))
        else:
            seen.append((ev["type"], ev["object"].metadata.annotations))
        if any(t == "BOOKMARK" for t, _ in seen):
            w.stop()
    check(seen[0] == ("MODIFIED", {"infera.amd.com/worker-info":
                                   '{"url": "http://10.0.0.6:30000"}'}),
          f"python client: the watch from the list's version sees the patch: {seen[:1]}")
    check(seen[-1][0] == "BOOKMARK" and seen[-1][1] > int(rv),
          f"python client: a BOOKMARK with a newer resourceVersion: {seen[-1]}")
    server.cond.acquire()
    server.compact()
    server.cond.release()
    try:
        for _ in watch.Watch().stream(api.list_namespaced_pod, NS, resource_version=rv,
                                      timeout_seconds=5):
            pass
        fail("python client: a watch from a compacted resourceVersion did not fail")
    except ApiException as e:
        check(e.status == 410, f"python client: 410 Gone from a compacted version ({e.status})")


def main():
    for tool in ("kubectl", "openssl"):
        if not shutil.which(tool):
            fail(f"{tool} is missing (scripts/install-deps)")
    d = tempfile.mkdtemp(prefix="infera-kube-")
    try:
        ca, cert, key = kube_apiserver.make_test_tls(d)
        server = kube_apiserver.Server(0, token=TOKEN, tls_cert=cert, tls_key=key,
                                       bookmark_interval_s=0.3).start()
        kubectl_checks(Kubectl(server.port, ca, d), d)
        python_checks(server.port, ca, server)
        server.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("kube api server fidelity OK", flush=True)


if __name__ == "__main__":
    main()
