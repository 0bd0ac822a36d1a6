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
proxy - direct. Throughput: wrk -c<conns> requests/s. Prints a Markdown table.
"""
import argparse, os, re, shutil, signal, subprocess, sys, tempfile, time, json, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--router", required=True)
ap.add_argument("--fake-worker", required=True)
ap.add_argument("--duration", default="5s")
ap.add_argument("--conns", type=int, default=32)
ap.add_argument("--router-threads", type=int, default=2)
ap.add_argument("--prompt-chars", type=int, default=200)
ap.add_argument("--long", action="store_true", help="8k-token chat (needs --tokenizer)")
ap.add_argument("--tokenizer", default="")
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


def wrk(port, conns, duration, body_file):
    lua = os.path.join(tmp, "post.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        f.write("local f = io.open(%r, 'rb')\nwrk.body = f:read('*a')\nf:close()\n" % body_file)
    out = subprocess.run(["wrk", "-t", str(min(conns, 2)), "-c", str(conns), "-d", duration,
                          "--latency", "-s", lua, f"http://127.0.0.1:{port}/v1/chat/completions"],
                         capture_output=True, text=True).stdout
    def lat(p):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)" % p, out, re.M)
        if not m:
            return float("nan")
        v = float(m.group(1))
        return v * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = int(non2xx.group(1)) if non2xx else 0
    return {"p50_us": lat("50"), "p99_us": lat("99"), "rps": rps, "errors": errors}


try:
    wports = [start([args.fake_worker, "--chunks", "1", "--threads", "1", "--name", n], r"listening on (\d+)")
              for n in ("A", "B")]
    body_file = os.path.join(tmp, "body.json")
    content = ("You are a helpful assistant. " * 1000)[: args.prompt_chars]
    with open(body_file, "w") as f:
        json.dump({"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 1}, f)

    def router(policy):
        argv = [args.router, "--host", "127.0.0.1", "--port", "0", "--threads", str(args.router_threads),
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
                return int(m.group(1))
            time.sleep(0.05)
        raise SystemExit("router did not start")

    rr_port = router("round-robin")
    kv_port = router("kv-aware")

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

    targets = [("direct (worker A)", wports[0]), ("infera-router round-robin", rr_port),
               ("infera-router kv-aware", kv_port), ("nginx round-robin", nginx_port)]
    for _, p in targets:  # warm up connection pools
        wrk(p, 4, "1s", body_file)
    rows = []
    for name, p in targets:
        lat = wrk(p, 1, args.duration, body_file)
        thr = wrk(p, args.conns, args.duration, body_file)
        rows.append((name, lat, thr))
    direct = rows[0][1]
    nginx_rps = rows[3][2]["rps"]
    print(f"\nprompt {args.prompt_chars} chars, wrk {args.duration}, latency at -c1, throughput at -c{args.conns}, "
          f"router/nginx threads {args.router_threads}\n")
    print("| target | p50 µs | p99 µs | added p50 µs | added p99 µs | req/s | vs nginx | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, lat, thr in rows:
        print(f"| {name} | {lat['p50_us']:.0f} | {lat['p99_us']:.0f} | {lat['p50_us'] - direct['p50_us']:.0f} | "
              f"{lat['p99_us'] - direct['p99_us']:.0f} | {thr['rps']:.0f} | {thr['rps'] / nginx_rps:.2f} | "
              f"{lat['errors'] + thr['errors']} |")
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
