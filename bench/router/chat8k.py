"""The warm/cold ~8k-token chat shared by the router benchmarks (run_bench.py,
hash_match_bench.py), and its ~100k-token version (run_bench.py)."""


def chat_messages(unique_at, turns=40):
    """An ~8k-token chat (40 turns of ~800 bytes: prose, code, French, Chinese), like
    bench/template; `turns` 500 gives ~100k tokens. The marker "@@UNIQUE@@" goes at
    the start of message `unique_at`."""
    sentences = ["The quick brown fox jumps over the lazy dog while the router counts blocks. ",
                 "def route(request):\n    return min(workers, key=lambda w: w.cost(request))\n",
                 "Le cache de préfixes évite de recalculer les mêmes jetons déjà vus. ",
                 "路由器根据缓存命中选择工作节点，以减少首个令牌的延迟。",
                 "for (int i = 0; i < n; ++i) { total += blocks[i] * weight; }\n"]
    state = 42
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(turns):
        content = ""
        while len(content.encode()) < 800:
            state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            content += sentences[(state >> 33) % 5]
        msgs.append({"role": "user" if turn % 2 == 0 else "assistant", "content": content})
    msgs.append({"role": "user", "content": "And finally?"})
    msgs[unique_at]["content"] = "@@UNIQUE@@ " + msgs[unique_at]["content"]
    return msgs
