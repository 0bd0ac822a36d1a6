#!/usr/bin/env bash
# User-space instructions per proxied request of infera-router, from callgrind: a
# load-independent measure of the router's own cost (doc/perf-router.md).
#
# usage: bench/router/callgrind_per_request.sh [BUILD_DIR] [POLICY]
# Two fake workers, the router under valgrind, a 2 s warm-up, counters zeroed, a 5 s
# wrk run (4 connections, short chat request), a dump; prints Ir / request.
set -euo pipefail
B=${1:-build}
POLICY=${2:-round-robin}
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
valgrind --tool=callgrind --callgrind-out-file="$T/cg.out" "$B/apps/infera-router/infera-router" \
  --host 127.0.0.1 --port "$RP" --threads 2 --router-policy "$POLICY" --log-level warn \
  --kv-event-transport none --worker "http://127.0.0.1:$WA,model_name=m" \
  --worker "http://127.0.0.1:$WB,model_name=m" >"$T/router.log" 2>&1 &
RPID=$!
pids+=($RPID)
for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$RP/health" && break; sleep 0.2; done
echo '{"model":"m","messages":[{"role":"user","content":"You are a helpful assistant. You are a helpful assistant. You are a helpful assistant. You are a helpful assistant. You are a helpful assistant."}],"max_tokens":1}' >"$T/body.json"
cat >"$T/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$T/body.json", "rb")
wrk.body = f:read("*a")
f:close()
LUA
url="http://127.0.0.1:$RP/v1/chat/completions"
wrk -t 1 -c 4 -d 2s -s "$T/post.lua" "$url" >/dev/null
callgrind_control -z "$RPID" >/dev/null
n=$(wrk -t 1 -c 4 -d 5s -s "$T/post.lua" "$url" | awk '/requests in/ {print $1}')
callgrind_control -d "$RPID" >/dev/null
ir=$(callgrind_annotate "$T/cg.out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
[ -n "${CG_OUT:-}" ] && cp "$T/cg.out.1" "$CG_OUT"
echo "policy=$POLICY requests=$n Ir/request=$((ir / n))"
