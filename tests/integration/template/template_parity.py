"""Template parity: renders deterministic generated chat requests with Python Jinja2
(Hugging Face's settings, reference_render.py) and with ours, and requires
byte-identical output. Every --command-every'th request goes through the real
`render` command (one process each); the rest through the driver's batch mode (same
ChatTemplate code, one process per model). When the reference raises, ours must fail
too (and for raise_exception, with the same message).

usage: /usr/bin/python3 template_parity.py --driver BIN --model NAME=DIR[:COUNT] ...
       [--seed N] [--now ISO]
"""

import argparse
import json
import random
import subprocess
import sys

import reference_render

WORDS = [
    "hello", "world", "the", "quick", "brown", "fox", "weather", "Paris", "code", "function",
    "naïve", "café", "日本語", "中文测试", "한국어", "Привет", "مرحبا", "שלום", "🙂", "🚀", "👩‍💻",
    "e\u0301", "a\u0308", "x²", "½", "ℕ", "\t", "  ", "{{ x }}", "{% if %}", "'quoted'",
    "\"dq\"", "back\\slash", "<think>", "</think>", "<tool_response>", "</tool_response>",
    "<|im_start|>", "<bos>", "1.5", "42", "-7", "null", "True", "\u00a0", "\u2028", "\u3000",
]


def text(rng, lo=0, hi=12):
    n = rng.randint(lo, hi)
    parts = [rng.choice(WORDS) for _ in range(n)]
    s = ""
    for p in parts:
        s += p + rng.choice([" ", " ", " ", "\n", "", ", ", ".\n\n"])
    if rng.random() < 0.2:
        s = rng.choice([" ", "\n", "\n\n", "  \n"]) + s
    if rng.random() < 0.2:
        s = s + rng.choice([" ", "\n", "\n\n", "\t"])
    return s


def json_value(rng, depth=0):
    kind = rng.randint(0, 8 if depth < 2 else 5)
    if kind == 0:
        return rng.randint(-1000, 100000)
    if kind == 1:
        return rng.choice([0.5, 1e-7, 3.14159, -2.0, 1e21, 100.0, 123456789.125])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4, 5):
        return text(rng, 0, 4)
    if kind == 6:
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "b", "key", "名前", "z", "unit"]) + str(i): json_value(rng, depth + 1)
            for i in range(rng.randint(0, 3))}


def tool_schema(rng, i):
    props = {}
    for j in range(rng.randint(0, 4)):
        p = {"type": rng.choice(["string", "integer", "number", "boolean", "array"]),
             "description": text(rng, 1, 5)}
        if p["type"] == "string" and rng.random() < 0.4:
            p["enum"] = ["celsius", "fahrenheit", "kelvin °K"]
        if p["type"] == "array":
            p["items"] = {"type": "string"}
        if rng.random() < 0.2:
            p["default"] = json_value(rng, 1)
        props[rng.choice(["location", "unit", "query", "limit", "ids", "città"]) + str(j)] = p
    fn = {"name": rng.choice(["get_weather", "search", "run_code", "lookup"]) + str(i),
          "description": text(rng, 1, 8),
          "parameters": {"type": "object", "properties": props,
                         "required": list(props)[:rng.randint(0, len(props))]}}
    if rng.random() < 0.15:
        return fn  # some clients send bare functions
    return {"type": "function", "function": fn}


def tool_call(rng, i):
    args = {k: json_value(rng, 1) for k in rng.sample(["location", "unit", "q", "n", "x"], rng.randint(0, 3))}
    fn = {"name": rng.choice(["get_weather", "search", "run_code"]) + str(i),
          "arguments": json.dumps(args, ensure_ascii=rng.random() < 0.5) if rng.random() < 0.4 else args}
    if rng.random() < 0.1:
        return fn  # a call without the "function" wrapper
    return {"id": "call_%d" % i, "type": "function", "function": fn}


def content(rng, allow_parts):
    r = rng.random()
    if r < 0.08:
        return ""
    if allow_parts and r < 0.25:
        parts = []
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.3:
                parts.append({"type": "image", "url": "https://example.com/a.png"})
            else:
                parts.append({"type": "text", "text": text(rng, 1, 10)})
        return parts
    return text(rng, 1, 25)


def conversation(rng, model, index):
    """One chat request body. Mostly valid for the model's template; some are not, so the
    error paths are compared too."""
    parts_ok = model == "gemma3" or rng.random() < 0.05
    strict = model == "gemma3" and rng.random() < 0.9  # alternate user/assistant
    messages = []
    use_tools = model != "gemma3" and rng.random() < 0.4
    body = {}
    if rng.random() < 0.5:
        sys_content = content(rng, parts_ok and model == "gemma3")
        if isinstance(sys_content, list):
            sys_content = [p for p in sys_content if p["type"] == "text"] or [{"type": "text", "text": "sys"}]
        messages.append({"role": "system", "content": sys_content})
    turns = rng.randint(1, 7)
    for t in range(turns):
        messages.append({"role": "user", "content": content(rng, parts_ok)})
        if t == turns - 1 and rng.random() < 0.7:
            break
        msg = {"role": "assistant"}
        r = rng.random()
        if r < 0.25:
            msg["content"] = "<think>\n" + text(rng, 1, 8) + "\n</think>\n\n" + text(rng, 1, 8)
        elif r < 0.45 and model != "gemma3":
            msg["content"] = text(rng, 0, 8)
            msg["reasoning_content"] = text(rng, 1, 8) if rng.random() < 0.8 else None
        else:
            msg["content"] = content(rng, parts_ok)
        if use_tools and not strict and rng.random() < 0.5:
            msg["tool_calls"] = [tool_call(rng, k) for k in range(rng.randint(1, 3))]
            if rng.random() < 0.3:
                msg["content"] = ""
            messages.append(msg)
            for k in range(len(msg["tool_calls"])):
                messages.append({"role": "tool", "content": rng.choice([
                    text(rng, 0, 6), json.dumps(json_value(rng), ensure_ascii=False),
                    "<tool_response>" + text(rng, 0, 3) + "</tool_response>"])})
            continue
        messages.append(msg)
    if not strict and rng.random() < 0.1:
        rng.shuffle(messages)
    body["messages"] = messages
    if use_tools:
        body["tools"] = [tool_schema(rng, k) for k in range(rng.randint(1, 3))]
    r = rng.random()
    if r < 0.15:
        body["add_generation_prompt"] = False
    elif r < 0.3:
        body["add_generation_prompt"] = True
    r = rng.random()
    if r < 0.2:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    elif r < 0.3:
        body["chat_template_kwargs"] = {"enable_thinking": True, "custom_flag": "x"}
    if rng.random() < 0.05:
        body["documents"] = [{"title": "doc", "text": text(rng, 1, 5)}]
    return body


def run(driver, model_dir, body_text, now):
    proc = subprocess.run(
        [driver, "render", "--router-tokenizer-path", model_dir, "--now", now],
        input=body_text.encode("utf-8"), capture_output=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace")


def run_batch(driver, model_dir, body_texts, now):
    proc = subprocess.run([driver, "batch", model_dir, now],
                          input="".join(t + "\n" for t in body_texts).encode("utf-8"),
                          capture_output=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("batch driver failed: " + proc.stderr.decode("utf-8", "replace"))
    results = []
    for line in proc.stdout.decode("utf-8").split("\n")[:-1]:
        r = json.loads(line)
        if "ok" in r:
            results.append((0, r["ok"].encode("utf-8"), ""))
        else:
            results.append((1, b"", r["error"]))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR[:COUNT]")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--now", default="2026-11-30T01:02:03")
    ap.add_argument("--command-every", type=int, default=10)
    args = ap.parse_args()
    now = reference_render.parse_now(args.now)
    failures = 0
    for spec in args.model:
        name, rest = spec.split("=", 1)
        count = 200
        if ":" in rest:
            rest, count_text = rest.rsplit(":", 1)
            count = int(count_text)
        reference = reference_render.ChatRenderer(rest, now)
        stats = {"identical": 0, "both_error": 0, "mismatch": 0, "via_command": 0}
        bodies = []
        for i in range(count):
            rng = random.Random("%d/%s/%d" % (args.seed, name, i))
            body = conversation(rng, name, i)
            bodies.append(json.dumps(body, ensure_ascii=rng.random() < 0.3))
        batch = run_batch(args.driver, rest, bodies, args.now)
        for i, body_text in enumerate(bodies):
            try:
                expected = reference.render(json.loads(body_text)).encode("utf-8")
                expected_error = None
            except reference_render.RaisedError as e:
                expected, expected_error = None, ("raised", str(e))
            except Exception as e:  # the template failed in Python: ours must fail too
                expected, expected_error = None, ("error", "%s: %s" % (type(e).__name__, e))
            if i % args.command_every == 0:
                rc, out, err = run(args.driver, rest, body_text, args.now)
                stats["via_command"] += 1
            else:
                rc, out, err = batch[i]
            ok = False
            if expected_error is None:
                ok = rc == 0 and out == expected
            else:
                ok = rc != 0 and (expected_error[0] != "raised" or expected_error[1] in err)
            if ok:
                stats["identical" if expected_error is None else "both_error"] += 1
                continue
            stats["mismatch"] += 1
            failures += 1
            if failures <= 5:
                print("MISMATCH %s #%d\nbody: %s\nexpected: %r\nexpected_error: %r\n"
                      "got rc=%d: %r\nstderr: %s" % (name, i, body_text, expected, expected_error,
                                                     rc, out, err), file=sys.stderr)
        print("%s: %d conversations (%d through the render command): %d byte-identical, "
              "%d failing in both, %d mismatches" % (name, count, stats["via_command"],
                                                     stats["identical"], stats["both_error"],
                                                     stats["mismatch"]))
        if stats["identical"] < count * 0.75:
            print("%s: too few successful renders to be a meaningful parity run" % name,
                  file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
