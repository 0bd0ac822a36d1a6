"""The Python Jinja2 side of the render benchmark: the same ~8k-token chat as
template_bench.cc, rendered with Hugging Face's settings; prints microseconds per render.

usage: /usr/bin/python3 bench/template/python_render_bench.py FIXTURES_DIR [ITERATIONS]
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration",
                                "template"))
import reference_render  # noqa: E402

SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the riverbank. ",
    "Please summarise the attached report and list the three main risks. ",
    "Here is the code: for (int i = 0; i < n; ++i) { total += values[i]; } ",
    "Le café est ouvert jusqu'à minuit, même le dimanche. ",
    "今天的天气很好。 ",
]


def chat_body():
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    state = 12345
    for turn in range(40):
        content = ""
        while len(content.encode("utf-8")) < 800:
            state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            content += SENTENCES[(state >> 33) % 5]
        messages.append({"role": "user" if turn % 2 == 0 else "assistant", "content": content})
    messages.append({"role": "user", "content": "And finally?"})
    return {"messages": messages}


def main():
    fixtures = sys.argv[1]
    iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    body = chat_body()
    now = reference_render.parse_now("2026-11-30T00:00:00")
    for model in ("qwen3", "llama3", "gemma3"):
        renderer = reference_render.ChatRenderer(
            os.path.join(fixtures, "tokenizer-%s" % model, "models"), now)
        out = renderer.render(body)
        start = time.perf_counter()
        for _ in range(iterations):
            renderer.render(body)
        elapsed = time.perf_counter() - start
        print("python_jinja2_render/%s: %.1f us per render (%d prompt bytes)"
              % (model, elapsed / iterations * 1e6, len(out.encode("utf-8"))))


if __name__ == "__main__":
    main()
