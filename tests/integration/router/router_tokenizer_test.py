#!/usr/bin/python3
"""infera-router with --router-tokenizer-path on a real model's files (Qwen 3).

Chat requests must route by real token blocks: for each request the pick line's
request_blocks must equal len(ids) // 16, where ids come from `infera-router render
--tokens` on the same body (the renderer the parity tests hold to Python Jinja2 and
the Hugging Face tokenizer). The bodies carry tools whose JSON keys are not sorted,
so a render that reordered keys would change the ids. A multi-turn follow-up
(same prefix, one more turn) must count its blocks the same way, and a string
completion prompt is tokenized too. Waits are bounded polls.
"""
import json, os, subprocess, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402  check, fail, poll
import router_integration_test as rit  # noqa: E402  Proc, PROCS, request, get_json, start_worker

BLOCK = 16


def render_ids(router, tok_dir, body):
    r = subprocess.run([router, "render", "--router-tokenizer-path", tok_dir, "--tokens"],
                       input=json.dumps(body), capture_output=True, text=True, timeout=120)
    harness.check(r.returncode == 0, f"render --tokens failed: {r.stderr}")
    return json.loads(r.stdout)


def main():
    args = harness.parse_flags("router", "fake-worker", "tokenizer-dir")
    rit.ARGS = args
    if not os.path.exists(os.path.join(args.tokenizer_dir, "tokenizer.json")):
        harness.fail(f"no tokenizer.json in {args.tokenizer_dir} (run scripts/fetch-fixtures)")

    worker, wport, _ = rit.start_worker("T")
    router = rit.Proc([args.router, "--host", "127.0.0.1", "--port", "0", "--threads", "2",
                       "--router-policy", "kv-aware", "--router-tokenizer-path", args.tokenizer_dir,
                       "--worker", f"http://127.0.0.1:{wport},model_name=qwen"], "router")
    rp = int(router.wait_line(r"listening on [\d.]+:(\d+)", timeout=120).group(1))
    harness.poll(lambda: rit.get_json(rp, "/health")["active_workers"] == 1, "1 worker")

    system = ("You are a meticulous assistant for a logistics company. " * 40).strip()
    tools = [{"type": "function", "function": {
        "name": "lookup_shipment", "description": "Find a shipment by id",
        "parameters": {"type": "object", "required": ["id"],
                       "properties": {"id": {"type": "string", "description": "shipment id"}}}}}]
    turn1 = {"model": "qwen", "max_tokens": 8, "tools": tools, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": "Where is shipment 42? Answer briefly, 你好 🚚."}]}
    turn2 = dict(turn1, messages=turn1["messages"] + [
        {"role": "assistant", "content": "It left Rotterdam this morning."},
        {"role": "user", "content": "And when does it arrive in Oslo?"}])

    for i, body in enumerate((turn1, turn2)):
        ids = render_ids(args.router, args.tokenizer_dir, body)
        rid = f"tok-{i}"
        s, _, b = rit.request(rp, "POST", "/v1/chat/completions", body,
                              {"X-Infera-Request-Id": rid})
        harness.check(s == 200, f"chat {i}: {s} {b[:200]!r}")
        m = router.wait_line(rf"pick policy=kv-aware .*request_id={rid} .*request_blocks=(\d+)")
        harness.check(int(m.group(1)) == len(ids) // BLOCK,
                  f"chat {i}: request_blocks {m.group(1)} != {len(ids)} ids // {BLOCK}")
        print(f"chat {i}: {len(ids)} tokens, {len(ids) // BLOCK} blocks OK", flush=True)

    # A string completion prompt: tokenized (with special tokens, as vLLM does).
    prompt = system + " Summarise the above."
    s, _, b = rit.request(rp, "POST", "/v1/completions",
                          {"model": "qwen", "prompt": prompt, "max_tokens": 4},
                          {"X-Infera-Request-Id": "tok-c"})
    harness.check(s == 200, f"completion: {s} {b[:200]!r}")
    m = router.wait_line(r"pick policy=kv-aware .*request_id=tok-c .*request_blocks=(\d+)")
    harness.check(int(m.group(1)) > 0, "completion prompt was not tokenized")

    router.p.terminate()
    harness.check(router.p.wait(30) == 0, "router exit code")
    print("router tokenizer OK", flush=True)


if __name__ == "__main__":
    with rit.PROCS:
        main()
