#!/usr/bin/python3
"""Router benchmark: added latency and throughput, side by side in one run.

Two fast fake workers (tests/integration/router/fake_worker.cc, non-streaming,
one chunk). The same load generator (wrk, POST /v1/chat/completions with a short
prompt) hits, in turn:
  direct      one fake worker
  rr          infera-router --router-policy round-robin in front of both
  kv          infera-router --router-policy kv-aware in front of both
  nginx       nginx (Debian) round-robin proxy in front of both (keep-alive upstream)
Latency: wrk -c1 (one connection, sequential requests) p50/p99; added latency =
proxy - direct. Throughput: wrk -c<conns> requests/s, and the CPU time each target
spends per request (utime + stime of its processes during the throughput run).
Prints a Markdown table.

Workloads (--workload):
  short        one 200-character user message (default)
  chat8k-cold  an ~8k-token multi-turn chat whose first message differs in every
               request: nothing of it was seen before (needs --tokenizer to matter)
  chat8k-warm  the same chat history in every request, only the last user turn
               differs: its prefix was seen before (the multi-turn case)
  chat100k-cold, chat100k-warm
               the same with a ~100k-token chat (500 turns, ~400 KB body); with
               --tokenizer the router's routing overhead (stage "total") p50 is read
               from its histogram: the figure llm-d's picker reports (2.98 ms)
Every request body is unique (a per-request counter), so no cache sees a repeat.
With --tokenizer the router's own stage timings (infera_router_routing_overhead_seconds,
mean per stage) are printed as well.
"""
import argparse, os, re, shutil, signal, subprocess, sys, tempfile, time, json, urllib.request

from chat8k import chat_messages

ap = argparse.ArgumentParser()
ap.add_argument("--router", required=True)
ap.add_argument("--fake-worker", required=True)
ap.add_argument("--duration", default="5s")
ap.add_argument("--conns", type=int, default=32)
ap.add_argument("--router-threads", type=int, default=2)
ap.add_argument("--prompt-chars", type=int, default=200)
ap.add_argument("--workload", default="short",
                choices=["short", "chat8k-cold", "chat8k-warm", "chat100k-cold", "chat100k-warm"])
ap.add_argument("--tokenizer", default="")
ap.add_argument("--rounds", type=int, default=1,
                help="repeat the measurements; the table shows per-target medians")
ap.add_argument("--verbose", action="store_true", help="print each wrk run's output")
ap.add_argument("--targets", default="direct,rr,kv,nginx",
                help="comma list of direct, rr, kv, nginx (direct and nginx are the baselines)")
ap.add_argument("--baseline-router", default="",
                help="another infera-router binary (e.g. an older commit's) measured beside "
                     "--router in the same rounds, with the same rr/kv targets")
args = ap.parse_args()

procs = []
tmp = tempfile.mkdtemp(prefix="bench-router-")


def start(argv, pattern):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(p)
    rx = re.compile(pattern)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        m = rx.search(line)
        if m:
            # Keep draining output so the child never blocks on a full pipe.
            import threading
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return int(m.group(1))
    raise SystemExit("did not start: " + " ".join(argv))


def cpu_ticks(pids):
    """utime + stime (clock ticks) of the processes and their children processes."""
    total = 0
    seen = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            for tid in os.listdir(f"/proc/{pid}/task"):
                for c in open(f"/proc/{pid}/task/{tid}/children").read().split():
                    todo.append(int(c))
        except OSError:
            pass
    return total


def write_lua(body_text):
    """A wrk script that sends `body_text` with @@UNIQUE@@ replaced by a per-request id."""
    pre, _, post = body_text.partition("@@UNIQUE@@")
    for name, text in (("pre", pre), ("post", post)):
        with open(os.path.join(tmp, name + ".txt"), "w") as f:
            f.write(text)
    lua = os.path.join(tmp, "post.lua")
    with open(lua, "w") as f:
        f.write(f"""
local function slurp(p) local f = io.open(p, "rb"); local t = f:read("*a"); f:close(); return t end
local pre = slurp({os.path.join(tmp, "pre.txt")!r})
local post = slurp({os.path.join(tmp, "post.txt")!r})
local n = 0
local tag = tostring(math.random(1, 1000000000))
function setup(thread) thread:set("tid", tostring(math.random(1, 1000000000))) end
function init(args) if tid then tag = tid end end
function request()
  n = n + 1
  return wrk.format("POST", nil, {{["Content-Type"] = "application/json"}},
                    pre .. "req-" .. tag .. "-" .. n .. post)
end
""")
    return lua


def wrk(port, conns, duration, lua, pids=()):
    t0 = cpu_ticks(pids)
    out = subprocess.run(["wrk", "-t", str(min(conns, 2)), "-c", str(conns), "-d", duration,
                          "--latency", "-s", lua, f"http://127.0.0.1:{port}/v1/chat/completions"],
                         capture_output=True, text=True).stdout
    def lat(p):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)" % p, out, re.M)
        if not m:
            return float("nan")
        v = float(m.group(1))
        return v * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
    t1 = cpu_ticks(pids)
    if args.verbose:
        print(f"--- wrk -c{conns} port {port}\n{out}", file=sys.stderr)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    n = int(re.search(r"(\d+) requests in", out).group(1))
    cpu_us = (t1 - t0) * 1e6 / os.sysconf("SC_CLK_TCK") / max(n, 1)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = int(non2xx.group(1)) if non2xx else 0
    return {"p50_us": lat("50"), "p99_us": lat("99"), "rps": rps, "errors": errors, "cpu_us": cpu_us}


def stage_sums(port):
    """{stage: (sum_seconds, count)} from the router's overhead histogram, and under
    "total_le" the cumulative bucket counts of stage "total" ({le: count}); and the
    prompt blocks of the picks under "blocks" (sum, count)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for m in re.finditer(r'^infera_router_routing_overhead_seconds_(sum|count)\{stage="(\w+)"\} (\S+)', text, re.M):
        sums = out.setdefault(m.group(2), [0.0, 0.0])
        sums[0 if m.group(1) == "sum" else 1] = float(m.group(3))
    out["total_le"] = {float(m.group(1)): float(m.group(2)) for m in re.finditer(
        r'^infera_router_routing_overhead_seconds_bucket\{stage="total",le="([^"]+)"\} (\S+)', text, re.M)}
    blocks = [0.0, 0.0]
    for m in re.finditer(r'^infera_router_pick_request_blocks_(sum|count)\{[^}]*\} (\S+)', text, re.M):
        blocks[0 if m.group(1) == "sum" else 1] += float(m.group(2))
    out["blocks"] = blocks
    return out


def bucket_p50(before, now):
    """p50 (µs) of the observations between two cumulative bucket snapshots, linear
    within its bucket; and the share of them at or under 1 ms."""
    les = sorted(now)
    counts = [now[le] - before.get(le, 0.0) for le in les]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return float("nan"), float("nan")
    under_1ms = next((c for le, c in zip(les, counts) if abs(le - 1e-3) < 1e-12), float("nan"))
    prev_le, prev_c = 0.0, 0.0
    for le, c in zip(les, counts):
        if c >= total / 2:
            if le == float("inf"):
                return prev_le * 1e6, under_1ms / total
            frac = (total / 2 - prev_c) / max(c - prev_c, 1e-9)
            return (prev_le + (le - prev_le) * frac) * 1e6, under_1ms / total
        prev_le, prev_c = le, c
    return float("nan"), under_1ms / total


_stage_before = {}


def stage_means(port):
    """Mean µs per stage since the previous call for this port."""
    now = stage_sums(port)
    before = _stage_before.get(port, {})
    _stage_before[port] = now
    means = {}
    for stage, v in now.items():
        if stage in ("total_le", "blocks"):
            continue
        s, c = v
        s0, c0 = before.get(stage, (0.0, 0.0))
        if c > c0:
            means[stage] = (s - s0) / (c - c0) * 1e6
    means["total_p50"], means["total_le_1ms"] = bucket_p50(before.get("total_le", {}),
                                                           now["total_le"])
    b0 = before.get("blocks", [0.0, 0.0])
    if now["blocks"][1] > b0[1]:
        means["prompt_blocks"] = (now["blocks"][0] - b0[0]) / (now["blocks"][1] - b0[1])
    return means


try:
    wports = [start([args.fake_worker, "--chunks", "1", "--threads", "1", "--name", n], r"listening on (\d+)")
              for n in ("A", "B")]
    if args.workload == "short":
        content = "@@UNIQUE@@ " + ("You are a helpful assistant. " * 1000)[: args.prompt_chars]
        messages = [{"role": "user", "content": content}]
    else:
        messages = chat_messages(1 if args.workload.endswith("-cold") else -1,
                                 turns=500 if args.workload.startswith("chat100k") else 40)
    body_text = json.dumps({"model": "m", "messages": messages, "max_tokens": 1}, ensure_ascii=False)
    body_file = write_lua(body_text)

    def router(policy, binary=args.router):
        argv = [binary, "--host", "127.0.0.1", "--port", "0", "--threads", str(args.router_threads),
                "--router-policy", policy, "--log-level", "warn", "--kv-event-transport", "none"]
        if args.tokenizer:
            argv += ["--router-tokenizer-path", args.tokenizer]
        for p in wports:
            argv += ["--worker", f"http://127.0.0.1:{p},model_name=m"]
        # --log-level warn hides the listening line; read the port from /proc instead.
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        deadline = time.time() + 20
        while time.time() < deadline:
            out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
            m = re.search(r"127\.0\.0\.1:(\d+)\s.*pid=%d," % p.pid, out)
            if m:
                return int(m.group(1)), p.pid
            time.sleep(0.05)
        raise SystemExit("router did not start")

    wanted = args.targets.split(",")
    rr = router("round-robin") if "rr" in wanted else None
    kv = router("kv-aware") if "kv" in wanted else None
    base = args.baseline_router
    base_rr = router("round-robin", base) if base and "rr" in wanted else None
    base_kv = router("kv-aware", base) if base and "kv" in wanted else None

    conf = os.path.join(tmp, "nginx.conf")
    nginx_port = 0
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); nginx_port = s.getsockname()[1]; s.close()
    with open(conf, "w") as f:
        f.write(f"""worker_processes {args.router_threads};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
daemon off;
events {{ worker_connections 4096; }}
http {{
  access_log off; client_max_body_size 64m; client_body_buffer_size 1m;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  upstream workers {{ {''.join(f'server 127.0.0.1:{p}; ' for p in wports)} keepalive 64; }}
  server {{
    listen 127.0.0.1:{nginx_port};
    location / {{ proxy_pass http://workers; proxy_http_version 1.1;
                 proxy_set_header Connection ""; proxy_buffering off; }}
  }}
}}
""")
    ng = subprocess.Popen(["nginx", "-c", conf, "-p", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(ng)
    time.sleep(0.5)

    targets = [("direct (worker A)", wports[0], [procs[0].pid]),
               ("infera-router round-robin", rr[0], [rr[1]]) if rr else None,
               ("infera-router kv-aware", kv[0], [kv[1]]) if kv else None,
               ("infera-router (baseline) round-robin", base_rr[0], [base_rr[1]]) if base_rr else None,
               ("infera-router (baseline) kv-aware", base_kv[0], [base_kv[1]]) if base_kv else None,
               ("nginx round-robin", nginx_port, [ng.pid])]
    targets = [t for t in targets if t is not None and
               ({"direct (worker A)": "direct", "nginx round-robin": "nginx"}.get(t[0]) in wanted or
                t[0].startswith("infera"))]
    for _, p, _ in targets:  # warm up connection pools
        wrk(p, 4, "1s", body_file)
    import statistics

    def median_of(runs):
        return {k: statistics.median(r[k] for r in runs) for k in runs[0]}

    samples = {name: ([], [], []) for name, _, _ in targets}
    for _ in range(args.rounds):
        for name, p, pids in targets:
            if name.startswith("infera"):
                stage_means(p)  # snapshot: the means below cover the -c1 run only
            samples[name][0].append(wrk(p, 1, args.duration, body_file))
            if name.startswith("infera"):
                samples[name][2].append(stage_means(p))
            samples[name][1].append(wrk(p, args.conns, args.duration, body_file, pids))
    rows = [(name, median_of(samples[name][0]), median_of(samples[name][1]))
            for name, _, _ in targets]
    overheads = {name: median_of(samples[name][2]) for name, _, _ in targets
                 if samples[name][2] and samples[name][2][0]}
    direct = rows[0][1] if rows[0][0].startswith("direct") else None
    nginx_rps = rows[-1][2]["rps"] if rows[-1][0].startswith("nginx") else float("nan")
    print(f"\nworkload {args.workload} ({len(body_text)} bytes), {args.rounds} round(s) (medians), "
          f"wrk {args.duration}, latency at -c1, "
          f"throughput at -c{args.conns}, router/nginx threads {args.router_threads}, "
          f"tokenizer {'yes' if args.tokenizer else 'no'}\n")
    print("| target | p50 µs | p99 µs | added p50 µs | added p99 µs | req/s | vs nginx | CPU µs/req | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, lat, thr in rows:
        added50 = lat['p50_us'] - direct['p50_us'] if direct else float("nan")
        added99 = lat['p99_us'] - direct['p99_us'] if direct else float("nan")
        print(f"| {name} | {lat['p50_us']:.0f} | {lat['p99_us']:.0f} | {added50:.0f} | {added99:.0f} | "
              f"{thr['rps']:.0f} | {thr['rps'] / nginx_rps:.2f} | {thr['cpu_us']:.0f} | "
              f"{lat['errors'] + thr['errors']} |")
    if overheads:
        print("\nRouter stage means during the -c1 run (µs, from infera_router_routing_overhead_seconds):\n")
        print("| target | parse | render_tokenize | hash_match | total | total p50 (buckets) | "
              "share total ≤ 1 ms | prompt blocks |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, st in overheads.items():
            print(f"| {name} | " + " | ".join(f"{st.get(k, float('nan')):.0f}" for k in
                                               ("parse", "render_tokenize", "hash_match", "total",
                                                "total_p50")) +
                  f" | {st.get('total_le_1ms', float('nan')):.2f} | "
                  f"{st.get('prompt_blocks', float('nan')):.0f} |")
finally:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
