#!/usr/bin/python3
"""infera-router with etcd discovery, all real processes: etcd (Debian etcd-server),
a fake worker, infera-register (the worker-side sidecar) and infera-router.

Checks: the registered worker appears in /v1/workers and serves requests; killing the
sidecar without revoke (SIGKILL) makes it vanish after the lease TTL; a new sidecar
brings it back; an etcd restart is survived (the worker is listed again afterwards);
SIGTERM on the sidecar revokes the lease and the worker vanishes.
"""
import argparse, json, os, shutil, signal, socket, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import router_integration_test as common
from router_integration_test import Proc, check, fail, get_json, poll, request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    ap.add_argument("--fake-worker", required=True)
    ap.add_argument("--register", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="router-etcd-")
    try:
        cport, pport = free_port(), free_port()
        etcd_argv = ["etcd", "--name", "t", "--data-dir", os.path.join(tmp, "etcd"),
                     "--listen-client-urls", f"http://127.0.0.1:{cport}",
                     "--advertise-client-urls", f"http://127.0.0.1:{cport}",
                     "--listen-peer-urls", f"http://127.0.0.1:{pport}",
                     "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
                     "--initial-cluster", f"t=http://127.0.0.1:{pport}"]
        etcd = Proc(etcd_argv, "etcd")
        etcd.wait_line(r"ready to serve client requests")
        w = Proc([args.fake_worker, "--name", "E"], "worker")
        wp = int(w.wait_line(r"listening on (\d+)").group(1))
        router = Proc([args.router, "--host", "127.0.0.1", "--port", "0", "--threads", "1",
                       "--discovery-backend", "etcd", "--etcd-endpoint", f"127.0.0.1:{cport}",
                       "--kv-event-transport", "none"], "router")
        rp = int(router.wait_line(r"listening on [\d.]+:(\d+)").group(1))
        reg_argv = [args.register, "--url", f"http://127.0.0.1:{wp}", "--model-name", "fake-model",
                    "--etcd-endpoint", f"127.0.0.1:{cport}", "--lease-ttl-s", "3", "--keepalive-s", "1"]
        wid = f"127.0.0.1:{wp}"

        def listed():
            return any(x["worker_id"] == wid for x in get_json(rp, "/v1/workers")["workers"])

        reg = Proc(reg_argv, "register")
        poll(listed, "worker registered through etcd", 20)
        s, _, b = request(rp, "POST", "/v1/chat/completions",
                          {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
        check(s == 200 and json.loads(b)["worker"] == "E", f"request via etcd worker: {s} {b}")

        reg.p.kill()  # no revoke: the lease must expire
        poll(lambda: not listed(), "worker vanishes after the lease TTL", 20)
        s, _, b = request(rp, "POST", "/v1/chat/completions",
                          {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
        check(s == 503, f"no worker -> 503, got {s} {b}")

        reg = Proc(reg_argv, "register2")
        poll(listed, "worker back with a new sidecar", 20)

        etcd.p.terminate()
        etcd.p.wait(10)
        etcd = Proc(etcd_argv, "etcd2")  # same data dir: the lease survives the restart
        etcd.wait_line(r"ready to serve client requests")
        poll(listed, "worker listed after the etcd restart", 30)
        s, _, _ = request(rp, "POST", "/v1/chat/completions",
                          {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
        check(s == 200, "request after etcd restart")

        reg.p.send_signal(signal.SIGTERM)  # revoke
        check(reg.p.wait(10) == 0, "sidecar exit code")
        poll(lambda: not listed(), "worker removed on revoke", 10)
        print("router etcd OK", flush=True)
    finally:
        for p in common.PROCS:
            if p.p.poll() is None:
                p.p.terminate()
                try:
                    p.p.wait(5)
                except subprocess.TimeoutExpired:
                    p.p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
