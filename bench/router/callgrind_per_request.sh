#!/usr/bin/env bash
# User-space instructions per proxied request of infera-router, from callgrind: a
# load-independent measure of the router's own cost (doc/perf-router.md); nginx's
# own figure under the same load side by side; or the syscalls per request.
#
# usage: bench/router/callgrind_per_request.sh [BUILD_DIR] [POLICY|nginx]
#   POLICY: an infera-router --router-policy (round-robin, kv-aware, ...); "nginx":
#   nginx (Debian, one worker process, the proxy configuration of run_bench.py) in
#   the router's place.
#   MODE=callgrind (default): the proxy under valgrind; prints Ir / request.
#   MODE=strace: the proxy runs natively under `strace -c -f`; prints syscalls /
#   request, in total and per call.
#   CG_OUT=FILE keeps the callgrind profile.
#   BODY_FILE=FILE posts that body instead of the short chat request (e.g. the 100k-token
#   chat of run_bench.py); ROUTER_ARGS adds router flags (e.g. --router-tokenizer-path);
#   DURATION (default 5s) the measured run.
# Two fake workers, a 2 s warm-up, counters zeroed, a 5 s wrk run (4 connections,
# short chat request), a dump.
set -euo pipefail
B=${1:-build}
POLICY=${2:-round-robin}
MODE=${MODE:-callgrind}
T=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
start_worker() {
  "$B/tests/integration/router/fake_worker" --chunks 1 --threads 1 --name "$1" >"$T/$1.log" 2>&1 &
  pids+=($!)
}
start_worker A
start_worker B
port_of() {
  for _ in $(seq 100); do
    p=$(grep -o 'listening on [0-9]*' "$T/$1.log" | awk '{print $3}' || true)
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.1
  done
  echo "worker $1 did not start" >&2; exit 1
}
WA=$(port_of A); WB=$(port_of B)
RP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [ "$POLICY" = nginx ]; then
  mkdir -p "$T/ng"
  # One process (master_process off) so valgrind / strace follow the worker itself.
  cat >"$T/nginx.conf" <<NGINX
master_process off; worker_processes 1; daemon off;
pid $T/ng/nginx.pid; error_log $T/ng/error.log;
events { worker_connections 4096; }
http {
  access_log off; client_max_body_size 64m; client_body_buffer_size 1m;
  client_body_temp_path $T/ng/body; proxy_temp_path $T/ng/proxy;
  fastcgi_temp_path $T/ng/fcgi; uwsgi_temp_path $T/ng/uwsgi; scgi_temp_path $T/ng/scgi;
  upstream workers { server 127.0.0.1:$WA; server 127.0.0.1:$WB; keepalive 64; }
  server {
    listen 127.0.0.1:$RP;
    location / { proxy_pass http://workers; proxy_http_version 1.1;
                 proxy_set_header Connection ""; proxy_buffering off; }
    location = /health { return 200 "ok"; }
  }
}
NGINX
  proxy=(nginx -c "$T/nginx.conf" -p "$T/ng")
else
  proxy=("$B/apps/infera-router/infera-router" --host 127.0.0.1 --port "$RP" --threads 2
         --router-policy "$POLICY" --log-level warn --kv-event-transport none
         --worker "http://127.0.0.1:$WA,model_name=m" --worker "http://127.0.0.1:$WB,model_name=m"
         ${ROUTER_ARGS:-})
fi
case "$MODE" in
  callgrind) valgrind --tool=callgrind --callgrind-out-file="$T/cg.out" "${proxy[@]}" >"$T/proxy.log" 2>&1 & ;;
  strace) "${proxy[@]}" >"$T/proxy.log" 2>&1 & ;;
  *) echo "MODE must be callgrind or strace" >&2; exit 2 ;;
esac
PPID_=$!
pids+=($PPID_)
for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$RP/health" && break; sleep 0.2; done
if [ -n "${BODY_FILE:-}" ]; then
  cp "$BODY_FILE" "$T/body.json"
else
  echo '{"model":"m","messages":[{"role":"user","content":"You are a helpful assistant. You are a helpful assistant. You are a helpful assistant. You are a helpful assistant. You are a helpful assistant."}],"max_tokens":1}' >"$T/body.json"
fi
cat >"$T/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$T/body.json", "rb")
wrk.body = f:read("*a")
f:close()
LUA
url="http://127.0.0.1:$RP/v1/chat/completions"
wrk -t 1 -c 4 -d 2s -s "$T/post.lua" "$url" >/dev/null
if [ "$MODE" = strace ]; then
  strace -c -f -p "$PPID_" -o "$T/strace.txt" &
  SPID=$!
  sleep 0.5  # attached to every thread
  n=$(wrk -t 1 -c 4 -d "${DURATION:-5s}" -s "$T/post.lua" "$url" | awk '/requests in/ {print $1}')
  kill -INT "$SPID"; wait "$SPID" 2>/dev/null || true
  echo "target=$POLICY requests=$n syscalls/request (strace -c -f):"
  awk -v n="$n" '$1 ~ /^[0-9.]+$/ && NF >= 5 {c = $4; name = $NF; if (name != "total") printf "  %-16s %.2f\n", name, c / n}
                 $NF == "total" {printf "  %-16s %.2f\n", "total", $4 / n}' "$T/strace.txt"
  exit 0
fi
callgrind_control -z "$PPID_" >/dev/null
n=$(wrk -t 1 -c 4 -d "${DURATION:-5s}" -s "$T/post.lua" "$url" | awk '/requests in/ {print $1}')
callgrind_control -d "$PPID_" >/dev/null
out=$(ls "$T"/cg.out* | grep -v '^'"$T"'/cg.out$' | tail -1)
ir=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
[ -n "${CG_OUT:-}" ] && cp "$out" "$CG_OUT"
echo "target=$POLICY requests=$n Ir/request=$((ir / n))"
