"""Snippet parity: small templates covering the expression language, statements,
filters, tests, methods, whitespace control and error cases, rendered by Python Jinja2
(Hugging Face's settings) and by infera::jinja::Template; outputs must be
byte-identical and errors must be errors on both sides (raise_exception: same message).

usage: /usr/bin/python3 snippet_parity.py DRIVER SNIPPETS_FILE
  SNIPPETS_FILE: one template per line, as a JSON string.
"""

import json
import subprocess
import sys

import reference_render

NOW = "2026-11-30T01:02:03"
CONTEXT = {"s": "a b", "n": 3, "f": 2.5, "l": [3, 1, 2], "d": {"b": 1, "a": 2}, "u": None,
           "e": "", "msgs": [{"role": "user", "content": "Hi ✓"},
                             {"role": "assistant", "content": "<think>\nx\n</think>\n\ny"}],
           "nested": {"k": [{"v": 1}, {"v": 2, "w": "é"}]}, "t": True, "big": 10 ** 15}


def main():
    driver, path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        templates = [json.loads(line) for line in f if line.strip()]
    env = reference_render.make_environment(reference_render.parse_now(NOW))
    lines = "".join(json.dumps({"template": t, "context": CONTEXT}) + "\n" for t in templates)
    proc = subprocess.run([driver, "snippets", NOW], input=lines.encode("utf-8"),
                          capture_output=True, timeout=300)
    if proc.returncode != 0:
        print("driver failed: " + proc.stderr.decode("utf-8", "replace"), file=sys.stderr)
        return 1
    ours = [json.loads(l) for l in proc.stdout.decode("utf-8").split("\n")[:-1]]
    failures = 0
    counts = {"identical": 0, "both_error": 0}
    for template, got in zip(templates, ours):
        try:
            expected, error = env.from_string(template).render(**CONTEXT), None
        except reference_render.RaisedError as e:
            expected, error = None, ("raised", str(e))
        except Exception as e:
            expected, error = None, ("error", "%s: %s" % (type(e).__name__, e))
        if error is None:
            ok = got.get("ok") == expected
        else:
            ok = "error" in got and (error[0] != "raised" or error[1] in got["error"])
        if ok:
            counts["identical" if error is None else "both_error"] += 1
            continue
        failures += 1
        print("MISMATCH %s\n  python: %.300r %r\n  ours:   %.300r" % (
            json.dumps(template), expected, error, got), file=sys.stderr)
    if len(ours) != len(templates):
        print("driver returned %d results for %d snippets" % (len(ours), len(templates)),
              file=sys.stderr)
        failures += 1
    print("%d snippets: %d identical, %d errors on both sides, %d mismatches"
          % (len(templates), counts["identical"], counts["both_error"], failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
