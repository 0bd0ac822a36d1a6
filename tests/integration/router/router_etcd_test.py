#!/usr/bin/python3
"""infera-router with etcd discovery, all real processes: etcd (Debian etcd-server),
a fake worker, infera-register (the worker-side sidecar) and infera-router.

Checks: the registered worker appears in /v1/workers and serves requests; killing the
sidecar without revoke (SIGKILL) makes it vanish after the lease TTL; a new sidecar
brings it back; an etcd restart is survived (the worker is listed again afterwards);
SIGTERM on the sidecar revokes the lease and the worker vanishes.
"""
import json, os, signal, sys
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import check, free_port, poll  # noqa: E402
from router_integration_test import PROCS, Proc, get_json, request  # noqa: E402


def main():
    args = harness.parse_flags("router", "fake-worker", "register")
    cport, pport = free_port(), free_port()
    etcd_dir = os.path.join(PROCS.dir, "etcd")  # removed with the logs
    etcd = harness.start_etcd(PROCS, "etcd", etcd_dir, cport, pport)
    _, wp, _ = harness.start_fake_worker(PROCS, args.fake_worker, "E")
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
    # same data dir: the lease survives the restart
    etcd = harness.start_etcd(PROCS, "etcd2", etcd_dir, cport, pport)
    poll(listed, "worker listed after the etcd restart", 30)
    s, _, _ = request(rp, "POST", "/v1/chat/completions",
                      {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
    check(s == 200, "request after etcd restart")

    reg.p.send_signal(signal.SIGTERM)  # revoke
    check(reg.p.wait(10) == 0, "sidecar exit code")
    poll(lambda: not listed(), "worker removed on revoke", 10)
    print("router etcd OK", flush=True)


if __name__ == "__main__":
    with PROCS:
        main()
