#!/usr/bin/python3
"""A small Kubernetes API server for the test suite: Pods only, in memory.

No real API server can run on these machines, so Kubernetes discovery is tested
against this one. It speaks the documented protocol of the parts discovery uses
(https://kubernetes.io/docs/reference/using-api/api-concepts/), and its fidelity is
checked by pointing the real `kubectl` and the real Python client (python3-kubernetes)
at it (kube_fidelity_test.py): list, watch and patch must work with both.

What it implements:
  - discovery documents kubectl reads: /version, /api, /apis, /api/v1;
  - Pods: list (labelSelector: =, ==, !=, exists, !key, in, notin), get, create,
    delete (graceful: deletionTimestamp first, removed by /_test/finalize or with
    gracePeriodSeconds=0), patch (application/merge-patch+json,
    strategic-merge-patch+json — merged as a merge patch, exact for metadata maps —
    and json-patch+json add/replace/remove), the status subresource;
  - resourceVersion: one counter for every change, stamped on the object and the list;
    watch (watch=true, or the legacy /api/v1/watch/... paths) from a resourceVersion
    replays the changes after it, from "" or "0" starts with ADDED for every current
    Pod; a version older than the compacted one is `410 Gone` (an ERROR event with a
    Status, code 410, reason Expired, as the API server sends it); objects that start
    or stop matching the selector come as ADDED / DELETED; BOOKMARK events every
    --bookmark-interval-s when allowWatchBookmarks=true; timeoutSeconds ends the
    stream cleanly; the stream is HTTP/1.1 chunked, one JSON object per line;
  - bearer-token authentication (401 Status without it) and, with --tls-cert/--tls-key,
    HTTPS.
Test controls (not Kubernetes API): POST /_test/compact (what came before now is
compacted; open watches get 410), POST /_test/silent-delete?namespace=N&name=P (the
Pod vanishes and its DELETED event is compacted away: open watches get 410 and must
relist), POST /_test/finalize?namespace=N&name=P (a Pod being deleted is removed),
GET /_test/watches (open watch streams).

Usage: kube_apiserver.py [--port 0] [--token T] [--tls-cert F --tls-key F]
                         [--bookmark-interval-s S]
Prints "kube-apiserver listening on PORT" once it serves. Also importable (Server).
"""
import argparse
import copy
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def make_test_tls(d):
    """A CA and a certificate for 127.0.0.1 signed by it, made with the `openssl`
    command in directory d; returns the paths (ca.crt, server.crt, server.key)."""
    def run(*argv):
        r = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {r.stderr}")
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
        "-out", "ca.crt", "-days", "2", "-subj", "/CN=infera-test-ca")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
        "-out", "server.csr", "-subj", "/CN=kube-apiserver")
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")
    return tuple(os.path.join(d, n) for n in ("ca.crt", "server.crt", "server.key"))


def now_rfc3339():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def json_patch(doc, ops):
    """RFC 6902 add / replace / remove (what kubectl patch --type json sends)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                i = len(parent) if last == "-" else int(last)
                parent.insert(i, op["value"]) if op["op"] == "add" else parent.__setitem__(i, op["value"])
            else:
                if op["op"] == "replace" and last not in parent:
                    raise KeyError(op["path"])
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        else:
            raise ValueError("unsupported json-patch op " + op["op"])
    return doc


_REQ = re.compile(r"^\s*(!?)([A-Za-z0-9._/-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*)|"
                  r"\s+(in|notin)\s*\(([^)]*)\))?\s*$")


def parse_selector(text):
    """A label selector as a list of predicates over a labels dict; ValueError if bad."""
    if not text:
        return []
    # Split on commas outside parentheses.
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    preds = []
    for part in parts:
        m = _REQ.match(part)
        if not m:
            raise ValueError(f"unable to parse requirement: {part!r}")
        neg, key, op, val, setop, values = m.groups()
        if neg:
            if op or setop:
                raise ValueError(f"unable to parse requirement: {part!r}")
            preds.append(lambda l, k=key: k not in l)
        elif op in ("=", "=="):
            preds.append(lambda l, k=key, v=val: l.get(k) == v)
        elif op == "!=":
            preds.append(lambda l, k=key, v=val: l.get(k) != v)
        elif setop:
            vals = {v.strip() for v in values.split(",") if v.strip()}
            if setop == "in":
                preds.append(lambda l, k=key, s=vals: l.get(k) in s)
            else:
                preds.append(lambda l, k=key, s=vals: l.get(k) not in s)
        else:
            preds.append(lambda l, k=key: k in l)
    return preds


def parse_bool(text):
    """Go's strconv.ParseBool, as the API server reads query booleans."""
    return text in ("1", "t", "T", "TRUE", "true", "True")


def matches(preds, pod):
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return all(p(labels) for p in preds)


class Server:
    """The API server's state and HTTP front."""

    def __init__(self, port=0, token=None, tls_cert=None, tls_key=None, bookmark_interval_s=1.0):
        self.token = token
        self.bookmark_interval_s = bookmark_interval_s
        self.cond = threading.Condition()
        self.rv = 100
        self.compacted_rv = 100
        self.pods = {}  # (namespace, name) -> pod
        self.log = []   # (rv, namespace, type, new object, old object)
        self.watch_epoch = 0  # bumped to end every open watch with 410
        self.open_watches = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.httpd.daemon_threads = True
        if tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_cert, tls_key)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]

    def serve_forever(self):
        self.httpd.serve_forever(poll_interval=0.1)

    def start(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.httpd.shutdown()
        with self.cond:
            self.watch_epoch += 1
            self.cond.notify_all()

    # --- state changes (called with self.cond held) ---
    def _record(self, ns, kind, new, old):
        self.rv += 1
        if new is not None:
            new["metadata"]["resourceVersion"] = str(self.rv)
        self.log.append((self.rv, ns, kind, copy.deepcopy(new if new is not None else old),
                         copy.deepcopy(old)))
        self.cond.notify_all()

    def create(self, ns, pod):
        meta = pod.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            return 422, status(422, "Invalid", "metadata.name: Required value")
        if (ns, name) in self.pods:
            return 409, status(409, "AlreadyExists", f'pods "{name}" already exists')
        pod.setdefault("apiVersion", "v1")
        pod["kind"] = "Pod"
        meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
        pod.setdefault("spec", {})
        pod.setdefault("status", {}).setdefault("phase", "Pending")
        self.pods[(ns, name)] = pod
        self._record(ns, "ADDED", pod, None)
        return 201, pod

    def modify(self, ns, name, fn):
        old = self.pods.get((ns, name))
        if old is None:
            return 404, status(404, "NotFound", f'pods "{name}" not found')
        new = fn(copy.deepcopy(old))
        new["metadata"]["name"], new["metadata"]["namespace"] = name, ns
        new["metadata"]["uid"] = old["metadata"]["uid"]
        if new == old:
            return 200, old
        self.pods[(ns, name)] = new
        self._record(ns, "MODIFIED", new, old)
        return 200, new

    def remove(self, ns, name, silently=False):
        old = self.pods.pop((ns, name), None)
        if old is None:
            return 404, status(404, "NotFound", f'pods "{name}" not found')
        self._record(ns, "DELETED", None, old)
        old = copy.deepcopy(old)
        old["metadata"]["resourceVersion"] = str(self.rv)
        if silently:
            self.compact()
        return 200, old

    def delete(self, ns, name, grace_s):
        pod = self.pods.get((ns, name))
        if pod is None:
            return 404, status(404, "NotFound", f'pods "{name}" not found')
        if grace_s == 0:
            return self.remove(ns, name)
        if pod["metadata"].get("deletionTimestamp"):
            return 200, pod

        def stamp(p):
            p["metadata"]["deletionTimestamp"] = now_rfc3339()
            p["metadata"]["deletionGracePeriodSeconds"] = grace_s
            return p
        return self.modify(ns, name, stamp)

    def compact(self):
        """Everything up to now is compacted; open watches end with 410."""
        self.compacted_rv = self.rv
        self.log = []
        self.watch_epoch += 1
        self.cond.notify_all()

    def list(self, ns, preds):
        items = [copy.deepcopy(p) for (n, _), p in sorted(self.pods.items())
                 if (ns is None or n == ns) and matches(preds, p)]
        return {"kind": "PodList", "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.rv)}, "items": items}


def _handler(server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the test prints what matters
            pass

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def body_json(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            return json.loads(raw) if raw else None

        def authorized(self):
            if server.token is None:
                return True
            if self.headers.get("Authorization") == f"Bearer {server.token}":
                return True
            self.reply(401, status(401, "Unauthorized", "Unauthorized"))
            return False

        def route(self, method):
            url = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            path = url.path.rstrip("/")
            if path.startswith("/_test/"):
                return self.test_control(method, path, q)
            if not self.authorized():
                return
            if method == "GET" and path == "/version":
                return self.reply(200, {"major": "1", "minor": "29", "gitVersion": "v1.29.0-test",
                                        "platform": "linux/amd64"})
            if method == "GET" and path == "/api":
                return self.reply(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [
                                            {"clientCIDR": "0.0.0.0/0",
                                             "serverAddress": f"127.0.0.1:{server.port}"}]})
            if method == "GET" and path == "/apis":
                return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
            if method == "GET" and path == "/api/v1":
                verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
                return self.reply(200, {"kind": "APIResourceList", "groupVersion": "v1",
                                        "resources": [
                                            {"name": "pods", "singularName": "pod",
                                             "namespaced": True, "kind": "Pod", "verbs": verbs,
                                             "shortNames": ["po"]},
                                            {"name": "pods/status", "singularName": "",
                                             "namespaced": True, "kind": "Pod",
                                             "verbs": ["get", "patch", "update"]}]})
            m = re.fullmatch(r"/api/v1(/watch)?(?:/namespaces/([^/]+))?/pods(?:/([^/]+))?(/status)?",
                             path)
            if not m:
                return self.reply(404, status(404, "NotFound", "the server could not find the "
                                                               "requested resource"))
            legacy_watch, ns, name, sub = m.groups()
            if name is None:
                if method == "GET":
                    try:
                        preds = parse_selector(q.get("labelSelector", ""))
                    except ValueError as e:
                        return self.reply(400, status(400, "BadRequest", str(e)))
                    if legacy_watch or parse_bool(q.get("watch", "")):
                        return self.watch(ns, preds, q)
                    with server.cond:
                        return self.reply(200, server.list(ns, preds))
                if method == "POST" and ns:
                    pod = self.body_json() or {}
                    with server.cond:
                        return self.reply(*server.create(ns, pod))
                return self.reply(405, status(405, "MethodNotAllowed", method))
            if method == "GET":
                with server.cond:
                    pod = server.pods.get((ns, name))
                    if pod is None:
                        return self.reply(404, status(404, "NotFound", f'pods "{name}" not found'))
                    return self.reply(200, pod)
            if method == "PATCH":
                return self.patch(ns, name, sub)
            if method == "DELETE":
                opts = self.body_json() or {}
                grace = q.get("gracePeriodSeconds", opts.get("gracePeriodSeconds", 30))
                with server.cond:
                    return self.reply(*server.delete(ns, name, int(grace)))
            return self.reply(405, status(405, "MethodNotAllowed", method))

        def patch(self, ns, name, sub):
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            try:
                patch = self.body_json()
            except ValueError as e:
                return self.reply(400, status(400, "BadRequest", f"invalid JSON: {e}"))

            def apply(pod):
                if kind == "application/json-patch+json":
                    new = json_patch(pod, patch)
                elif kind in ("application/merge-patch+json",
                              "application/strategic-merge-patch+json"):
                    new = merge_patch(pod, patch)
                else:
                    raise TypeError(kind)
                if sub:  # the status subresource changes status only
                    pod["status"] = new.get("status", {})
                    return pod
                new["status"] = pod.get("status", {})  # and the main resource not status
                return new
            with server.cond:
                try:
                    return self.reply(*server.modify(ns, name, apply))
                except TypeError:
                    return self.reply(415, status(415, "UnsupportedMediaType",
                                                  f"the body of the request was in an unknown "
                                                  f"format - accepted media types include: "
                                                  f"application/json-patch+json, "
                                                  f"application/merge-patch+json, "
                                                  f"application/strategic-merge-patch+json"))
                except (KeyError, ValueError, IndexError) as e:
                    return self.reply(422, status(422, "Invalid", f"patch failed: {e}"))

        def chunk(self, obj):
            data = (json.dumps(obj) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def watch(self, ns, preds, q):
            rv_text = q.get("resourceVersion", "")
            bookmarks = parse_bool(q.get("allowWatchBookmarks", ""))
            timeout_s = float(q.get("timeoutSeconds") or 1800)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            end = time.time() + timeout_s
            with server.cond:
                epoch = server.watch_epoch
                pending = []
                if rv_text in ("", "0"):
                    start = server.rv
                    for p in server.list(ns, preds)["items"]:
                        pending.append({"type": "ADDED", "object": p})
                else:
                    start = int(rv_text)
                    if start < server.compacted_rv:
                        pending.append({"type": "ERROR", "object": status(
                            410, "Expired",
                            f"too old resource version: {start} ({server.compacted_rv})")})
                        start = None
                server.open_watches += 1
            try:
                last_sent = time.time()
                for e in pending:
                    self.chunk(e)
                while start is not None and time.time() < end:
                    with server.cond:
                        events = [e for e in server.log if e[0] > start]
                        if not events and server.watch_epoch == epoch:
                            server.cond.wait(timeout=min(0.2, max(0.0, end - time.time())))
                            events = [e for e in server.log if e[0] > start]
                        if server.watch_epoch != epoch:
                            self.chunk({"type": "ERROR", "object": status(
                                410, "Expired", f"too old resource version: {start} "
                                                f"({server.compacted_rv})")})
                            break
                        current = server.rv
                    for rv, ens, kind, new, old in events:
                        start = rv
                        if ns is not None and ens != ns:
                            continue
                        was = old is not None and matches(preds, old)
                        now = kind != "DELETED" and matches(preds, new)
                        if kind == "DELETED":
                            out = "DELETED" if was else None
                        elif was and now:
                            out = "MODIFIED"
                        elif now:
                            out = "ADDED"
                        elif was:
                            out = "DELETED"
                        else:
                            out = None
                        if out:
                            self.chunk({"type": out, "object": new})
                            last_sent = time.time()
                    if bookmarks and time.time() - last_sent >= server.bookmark_interval_s:
                        self.chunk({"type": "BOOKMARK", "object": {
                            "kind": "Pod", "apiVersion": "v1",
                            "metadata": {"resourceVersion": str(current)}}})
                        start = max(start, current)
                        last_sent = time.time()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                pass
            finally:
                with server.cond:
                    server.open_watches -= 1
            self.close_connection = True

        def test_control(self, method, path, q):
            with server.cond:
                if path == "/_test/watches":
                    return self.reply(200, {"open": server.open_watches, "rv": server.rv})
                if method != "POST":
                    return self.reply(405, {})
                if path == "/_test/compact":
                    server.compact()
                    return self.reply(200, {"compacted": server.compacted_rv})
                if path == "/_test/silent-delete":
                    return self.reply(*server.remove(q["namespace"], q["name"], silently=True))
                if path == "/_test/finalize":
                    return self.reply(*server.remove(q["namespace"], q["name"]))
            return self.reply(404, {})

        def do_GET(self):
            self.route("GET")

        def do_POST(self):
            self.route("POST")

        def do_PATCH(self):
            self.route("PATCH")

        def do_DELETE(self):
            self.route("DELETE")

        def do_PUT(self):
            self.route("PUT")

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--bookmark-interval-s", type=float, default=1.0)
    a = ap.parse_args()
    s = Server(a.port, a.token, a.tls_cert, a.tls_key, a.bookmark_interval_s)
    print(f"kube-apiserver listening on {s.port}", flush=True)
    s.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
