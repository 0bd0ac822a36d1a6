"""The one process and HTTP harness of the Python integration tests and scripts/demo.

Used by tests/integration/{router,hostile,sim}/*.py (they put tests/integration on
sys.path) and run as a script by scripts/demo (`harness.py fleet ... -- CMD`, below).
It starts the real processes (infera-router, infera-mock-engine, fake_worker, etcd,
infera-register) on OS-picked ports (port 0, or `free_port()`'s bind probe where a
program needs a number up front), and has the raw-socket helper `raw()`.

Contract: every child started through `Processes` writes its merged stdout/stderr
to a log file in a private temporary directory (never an unread pipe, so a chatty
router cannot block on a full pipe), dies with the test process (PR_SET_PDEATHSIG,
so a ctest timeout that kills the test leaves nothing behind), and is terminated
(then killed) by `Processes.stop_all()` — call it from a `finally`, or use
`with Processes() as procs:`. Waits are bounded polls, never fixed sleeps.
Thread-safety: none; use from the test's main thread.
"""
import argparse
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def parse_flags(*required, **optional):
    """The test's command line: each name in `required` is a mandatory --name VALUE;
    each keyword an optional --key VALUE (underscores as dashes) with that default."""
    ap = argparse.ArgumentParser()
    for name in required:
        ap.add_argument("--" + name, required=True)
    for name, default in optional.items():
        ap.add_argument("--" + name.replace("_", "-"), default=default)
    return ap.parse_args()


def check(cond, what):
    """Raises AssertionError(what) unless cond; prints 'ok: what' otherwise."""
    if not cond:
        raise AssertionError(what)
    print("ok:", what, flush=True)


def fail(what):
    """Raises AssertionError(what): a test's failure with no condition to check."""
    raise AssertionError(what)


def poll(fn, what, timeout=20, interval=0.05):
    """Calls fn until it returns a truthy value (returned) or `timeout` s pass (raises)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            print("ok:", what, flush=True)
            return v
        time.sleep(interval)
    raise AssertionError("timed out: " + what)


def http(method, url, body=None, timeout=30, headers=None):
    """One JSON request (with `headers` added); returns (status, body text, headers).
    Connection errors raise."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def raw(port, data, read=True, timeout=10):
    """Sends bytes on a fresh connection to 127.0.0.1:port; returns every byte read
    until the peer closes (or resets, or `timeout` s pass without a byte). With
    read=False it closes right after sending (a client that vanishes) and returns b""."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = recv_all(s) if read else b""
    s.close()
    return out


def recv_all(s):
    """Every byte `s` gives until the peer closes (or resets, or its timeout passes)."""
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return out


def free_port():
    """A port nothing listens on right now (bind probe on 127.0.0.1:0), for programs
    that need a number up front (etcd) or for a worker address that refuses connects."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Proc:
    """A started child: `p` (Popen), `name`, `log` (path of its output)."""

    def __init__(self, p, name, log):
        self.p, self.name, self.log = p, name, log

    def output(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def grep(self, pattern):
        """Every output line so far that matches `pattern`."""
        rx = re.compile(pattern)
        return [line for line in self.output().splitlines() if rx.search(line)]

    def tail(self, lines=30):
        return "\n".join(self.output().splitlines()[-lines:])

    def wait_line(self, pattern, timeout=None):
        """Returns the re.Match of the first output line matching `pattern` (within 30 s,
        90 s under the sanitizers: a Debug+ASan router loading the Qwen 3 tokenizer
        beside two engines doing the same took over 30 s on a busy 2-core machine)."""
        if timeout is None:
            timeout = 90 if os.environ.get("INFERA_SANITIZED") else 30
        rx = re.compile(pattern)
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in self.output().splitlines():
                m = rx.search(line)
                if m:
                    return m
            if self.p.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.p.returncode}:\n{self.tail()}")
            time.sleep(0.02)
        raise RuntimeError(f"{self.name}: no line matching {pattern!r}:\n{self.tail()}")


class Processes:
    """Owns the children of one test run (and their log directory)."""

    def __init__(self, keep_logs=False, log_dir=None):
        """Logs go to a fresh temporary directory (removed by stop_all unless
        keep_logs), or to `log_dir` (created; always kept)."""
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
        self.dir = log_dir or tempfile.mkdtemp(prefix="infera-test-")
        self.procs = []
        self.keep_logs = keep_logs or bool(log_dir)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.dump_tails()
        self.stop_all()
        return False

    def start(self, name, argv, nofile=None, env=None):
        """Starts argv with its output in `<dir>/<name>.log`. nofile=(soft, hard) sets
        the child's RLIMIT_NOFILE; env (a dict) replaces the environment."""
        def preexec():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
            _die_with_parent()
        log = os.path.join(self.dir, f"{name}.log")
        with open(log, "w") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, preexec_fn=preexec, env=env)
        proc = Proc(p, name, log)
        self.procs.append(proc)
        return proc

    def run(self, name, argv, timeout, env=None):
        """Runs argv to completion (bounded); returns (returncode, output)."""
        proc = self.start(name, argv, env=env)
        try:
            proc.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.p.kill()
            proc.p.wait()
            raise AssertionError(f"{name} did not finish in {timeout} s:\n{proc.tail()}")
        return proc.p.returncode, proc.output()

    def dump_tails(self):
        for proc in self.procs:
            print(f"--- {proc.name} (exit {proc.p.poll()}) last lines:\n{proc.tail()}", flush=True)

    def stop_all(self):
        for proc in self.procs:
            if proc.p.poll() is None:
                proc.p.terminate()
        for proc in self.procs:
            try:
                proc.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.p.kill()
                proc.p.wait()
        self.procs = []
        if not self.keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)


def metric(base, name):
    """The value of the unlabelled sample `name` on base's /metrics, or None."""
    status, body, _ = http("GET", base + "/metrics")
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", body, re.M)
    return float(m.group(1)) if status == 200 and m else None


def debug_requests(fields):
    """The generation bodies an infera-mock-engine started by start_engine received last
    (GET /debug/requests, oldest first)."""
    status, body, _ = http("GET", f"http://127.0.0.1:{fields['port']}/debug/requests")
    check(status == 200, "GET /debug/requests")
    return [r["body"] for r in json.loads(body)]


def binaries(build):
    """(infera-bench, infera-mock-engine, infera-router) paths in a build tree."""
    return tuple(os.path.join(build, f"apps/{b}/{b}")
                 for b in ("infera-bench", "infera-mock-engine", "infera-router"))


def run_bench_json(procs, name, argv, timeout):
    """Runs `infera-bench ... --json FILE` (FILE in the log dir), checks it succeeded
    and returns the parsed JSON."""
    out_json = os.path.join(procs.dir, name + ".json")
    t0 = time.time()
    print(name + ":", " ".join(argv[1:]), flush=True)
    rc, out = procs.run(name, [*argv, "--json", out_json], timeout=timeout)
    print(out, flush=True)
    check(rc == 0, f"{name} succeeded ({time.time() - t0:.1f} s)")
    with open(out_json) as f:
        return json.load(f)


def start_engine(procs, engine_bin, name, *extra):
    """Starts infera-mock-engine on OS-picked ports (HTTP, events, replay).

    Returns (Proc, fields) with fields = {"port", "events", "replay"} from its
    'infera-mock-engine listening port=P events=E replay=R' line.
    """
    proc = procs.start(name, [engine_bin, "--host", "127.0.0.1", "--port", "0",
                              "--model-name", "mock-model",
                              "--kv-events-endpoint", "tcp://127.0.0.1:0",
                              "--kv-replay-endpoint", "tcp://127.0.0.1:0", *extra])
    line = proc.wait_line(r"infera-mock-engine listening .*").group(0)
    fields = dict(kv.split("=", 1) for kv in line.split()[2:] if "=" in kv)
    return proc, fields


def worker_flag(fields, model="mock-model", block_size=16):
    """The router's --worker value for an engine started by start_engine."""
    wid = f"127.0.0.1:{fields['port']}"
    return (f"http://{wid},worker_id={wid},model_name={model},"
            f"kv_events_endpoint={fields['events']},kv_replay_endpoint={fields['replay']},"
            f"kv_block_size={block_size}")


def start_router(procs, router_bin, workers, *extra, name="router", ready=True):
    """Starts infera-router on an OS-picked port with static --worker flags.

    Returns (Proc, base_url) once it listens, lists every worker on /v1/workers and
    (ready=True) answers /ready 200.
    """
    argv = [router_bin, "--host", "127.0.0.1", "--port", "0", "--kv-events-topic", "kv-events"]
    for w in workers:
        argv += ["--worker", w]
    proc = procs.start(name, argv + list(extra))
    port = proc.wait_line(r"infera-router listening on \S*:(\d+)").group(1)
    base = f"http://127.0.0.1:{port}"

    def all_listed():
        status, body, _ = http("GET", base + "/v1/workers")
        return status == 200 and len(json.loads(body)["workers"]) == len(workers)
    poll(all_listed, f"router lists its {len(workers)} workers")
    # Ready (unless `ready` is False): the engines' replay sockets have rebuilt the
    # views (/ready is 503 "starting" until then, --ready-after-replay), as a
    # readiness probe would wait.
    if ready:
        poll(lambda: http("GET", base + "/ready")[0] == 200, "router ready (/ready 200)")
    return proc, base


def start_fake_worker(procs, fake_worker_bin, name, *extra):
    """Starts tests/integration/router's fake_worker on an OS-picked port.

    Returns (Proc, port, kv) where kv is its ZMQ endpoint when started with
    --kv-events-port, else None.
    """
    w = procs.start(name, [fake_worker_bin, "--name", name, *extra])
    port = int(w.wait_line(r"listening on (\d+)").group(1))
    kv = None
    if "--kv-events-port" in extra:
        kv = w.wait_line(r"kv-events on (\S+)").group(1)
    return w, port, kv


def start_etcd(procs, name, data_dir, client_port, peer_port):
    """Starts a one-member etcd (Debian etcd-server) on the given ports and data dir
    (a restart on the same dir keeps its leases); returns its Proc once it serves."""
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    proc = procs.start(name, ["etcd", "--name", "t", "--data-dir", data_dir,
                              "--listen-client-urls", client, "--advertise-client-urls", client,
                              "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                              "--initial-cluster", f"t={peer}"])
    proc.wait_line(r"ready to serve client requests")
    return proc


def _fleet(argv):
    """`harness.py fleet [options] -- CMD ...`: starts --engines mock engines and one
    router per policy (static discovery), runs CMD with `--router POLICY=URL` and
    `--reset-engine URL` appended, stops everything, exits with CMD's status. With
    --separate-engines each policy's router gets its own --engines engines, and each
    `--router POLICY=URL` is followed by the `--reset-engine URL`s of its engines (so the
    policies can be replayed side by side, under the same background load)."""
    if "--" not in argv:
        raise SystemExit("harness.py fleet: usage: fleet [options] -- CMD ...")
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="harness.py fleet")
    ap.add_argument("--engine", required=True, help="infera-mock-engine binary")
    ap.add_argument("--router", required=True, help="infera-router binary")
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--policies", default="kv-aware,round-robin")
    ap.add_argument("--engine-args", default="", help="extra engine flags (one string)")
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--prefix", default="harness", help="what the status line starts with")
    ap.add_argument("--separate-engines", action="store_true",
                    help="each policy's router gets its own engines")
    args = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:]
    with Processes(log_dir=args.log_dir) as procs:
        appended, shared = [], None
        for policy in args.policies.split(","):
            if shared is None or args.separate_engines:
                shared = _engines(procs, args, f"engine-{policy}-" if args.separate_engines
                                  else "engine")
            workers, resets = shared
            _, base = start_router(procs, args.router, workers, "--router-policy", policy,
                                   name=f"router-{policy}")
            appended += ["--router", f"{policy}={base}"]
            if args.separate_engines:
                appended += resets
        if not args.separate_engines:
            appended += resets
        print(f"{args.prefix}: {args.engines} mock engines"
              f"{' per policy' if args.separate_engines else ''}, routers: "
              f"{' '.join(a for a in appended if '=' in a)}", flush=True)
        code = subprocess.call(cmd + appended)
        if code < 0:  # as a shell says it: 128 + the signal
            print(f"{args.prefix}: {cmd[0]} killed by signal {-code}", flush=True)
            code = 128 - code
        return code


def _engines(procs, args, prefix):
    """Starts args.engines mock engines; returns (their --worker flags, --reset-engine args)."""
    workers, resets = [], []
    for i in range(args.engines):
        _, f = start_engine(procs, args.engine, f"{prefix}{i}", *args.engine_args.split())
        workers.append(worker_flag(f))
        resets += ["--reset-engine", f"http://127.0.0.1:{f['port']}"]
    return workers, resets


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "fleet":
        raise SystemExit("usage: harness.py fleet [options] -- CMD ...")
    sys.exit(_fleet(sys.argv[2:]))
