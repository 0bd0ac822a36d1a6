#!/usr/bin/python3
"""Multimodal affinity end to end (spec "Multimodal (image) affinity", architecture §8):
the real infera-router at its default flags with real mock engines.
Usage: multimodal_test.py BUILD_DIR

1. Mixed fleet (four engines): for each request shape, a first request with an image
   (mm_images=1 mm_affinity_hits=0), then the same image with other text goes back to
   that worker (mm_affinity_hits=1):
   OpenAI image_url (http URL), OpenAI input_audio, Anthropic /v1/messages image
   (base64 source; its key is the data URI's, so an OpenAI data URI of the same bytes
   follows it) and Anthropic url source, a top-level `images` list. Unseen images
   carry no affinity (mm_affinity_hits=0) and are spread by load over the idle
   fleet. The image URLs point at a listening socket of the test: the router never
   connects to it (it never fetches an image).
2. PD fleet (two prefill + two decode engines, sglang-bootstrap): the affinity
   applies in the prefill pool only: the repeat image goes to the same prefill worker
   (role=prefill ... mm_affinity_hits=1), while its decode picks carry no affinity
   (role=decode ... mm_affinity_hits=0): decode routes by load.
Waits are bounded polls; no fixed sleeps.
"""
import base64
import json
import os
import re
import socket
import sys
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Processes, binaries, check, start_engine, start_router, worker_flag  # noqa: E402

BUILD = sys.argv[1]
_, ENGINE, ROUTER = binaries(BUILD)
PICK = re.compile(r"pick policy=kv-aware role=(\S+) request_id=(\S+) picked=(\S+) .*"
                  r"mm_images=(\d+) mm_affinity_hits=(\d+)")


class Client:
    def __init__(self, base, router_proc):
        self.base, self.router, self.sent = base, router_proc, 0

    def post(self, path, body):
        """Sends one request with its own request id; {role: (picked, images, hits)}."""
        self.sent += 1
        rid = f"mm-{self.sent}"
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     method="POST",
                                     headers={"Content-Type": "application/json",
                                              "X-Infera-Request-Id": rid})
        with urllib.request.urlopen(req, timeout=30) as r:
            check(r.status == 200, f"{path} {rid} answered 200")
            r.read()
        out = {}
        for line in self.router.grep(r"request_id=%s " % re.escape(rid)):
            m = PICK.search(line)
            if m:
                out[m.group(1)] = (m.group(3), int(m.group(4)), int(m.group(5)))
        return out


def text(seed):
    return f"Describe picture {seed} in {seed % 5 + 3} words, please, for order {seed * 37}."


def chat(*blocks, seed, **extra):
    return "/v1/chat/completions", dict(
        {"model": "mock-model", "max_tokens": 2,
         "messages": [{"role": "user", "content": [{"type": "text", "text": text(seed)},
                                                   *blocks]}]}, **extra)


def messages(*blocks, seed):
    return "/v1/messages", {"model": "mock-model", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": text(seed)}, *blocks]}]}


def shapes(url):
    """(name, make(seed) -> (path, body)) of each request shape, each with its own image."""
    png = base64.b64encode(b"\x89PNG not really a png %d" % 1).decode()
    wav = base64.b64encode(b"RIFF not really a wav").decode()
    return [
        ("openai image_url", lambda s: chat({"type": "image_url", "image_url": {"url": url("a")}},
                                            seed=s)),
        ("openai input_audio", lambda s: chat(
            {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}}, seed=s)),
        ("anthropic base64 image", lambda s: messages(
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": png}}, seed=s)),
        ("openai data URI of the same bytes", lambda s: chat(
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}, seed=s)),
        ("anthropic url image", lambda s: messages(
            {"type": "image", "source": {"type": "url", "url": url("b")}}, seed=s)),
        ("top-level images", lambda s: chat(seed=s, images=[url("c")])),
    ]


def test_mixed(url):
    with Processes() as procs:
        fields = [start_engine(procs, ENGINE, f"engine{i}", "--speedup", "50")[1]
                  for i in range(4)]
        rproc, base = start_router(procs, ROUTER, [worker_flag(f) for f in fields])
        client = Client(base, rproc)
        seed = 0
        holders = {}
        for name, make in shapes(url):
            seed += 1
            first = client.post(*make(seed))["mixed"]
            # The data-URI shape repeats the Anthropic image's bytes: already held.
            if name == "openai data URI of the same bytes":
                check(first[0] == holders["anthropic base64 image"] and first[1:] == (1, 1),
                      f"{name}: follows the Anthropic image to its worker ({first})")
                continue
            check(first[1:] == (1, 0), f"{name}: one image, not held yet ({first})")
            holders[name] = first[0]
            for _ in range(2):
                seed += 1
                again = client.post(*make(seed))["mixed"]
                check(again == (first[0], 1, 1),
                      f"{name}: the same image with other text goes to {first[0]} ({again})")
        # Unseen images: no affinity, spread by load over the (idle) fleet.
        unseen = []
        for i in range(8):
            seed += 1
            pick = client.post(*chat({"type": "image_url", "image_url": {"url": url(f"u{i}")}},
                                     seed=seed))["mixed"]
            check(pick[1:] == (1, 0), f"unseen image {i}: no affinity ({pick})")
            unseen.append(pick[0])
        check(len(set(unseen)) == 4, f"unseen images went to every worker ({unseen})")


def test_pd(url):
    with Processes() as procs:
        workers = []
        for role in ("prefill", "prefill", "decode", "decode"):
            _, f = start_engine(procs, ENGINE, f"{role}{len(workers)}", "--speedup", "50",
                                "--role", role, "--pd-protocol", "sglang-bootstrap")
            flag = worker_flag(f) + f",disagg_mode={role},disagg_protocol=sglang-bootstrap"
            if role == "prefill":
                flag += f",bootstrap_host=127.0.0.1,bootstrap_port={f['bootstrap']}"
            workers.append(flag)
        rproc, base = start_router(procs, ROUTER, workers)
        client = Client(base, rproc)
        image = {"type": "image_url", "image_url": {"url": url("pd")}}
        first = client.post(*chat(image, seed=100))
        check(first["prefill"][1:] == (1, 0), f"PD: first prefill pick, image not held {first}")
        for seed in range(101, 105):
            picks = client.post(*chat(image, seed=seed))
            check(picks["prefill"] == (first["prefill"][0], 1, 1),
                  f"PD: the repeat image goes to prefill {first['prefill'][0]} ({picks})")
            check(picks["decode"][1:] == (1, 0), f"PD: the decode pick has no affinity {picks}")
        # The image is held by the prefill target only: the decode targets' cost never
        # has an image term (an unseen image in the prefill pool still has none).
        other = client.post(*chat({"type": "image_url", "image_url": {"url": url("pd2")}},
                                  seed=106))
        check(other["prefill"][1:] == (1, 0) and other["decode"][1:] == (1, 0),
              f"PD: an unseen image has no affinity in either pool ({other})")


def main():
    # A listening socket the image URLs point at: nothing may connect to it.
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(16)
    port = trap.getsockname()[1]

    def url(name):
        return f"http://127.0.0.1:{port}/{name}.png"
    test_mixed(url)
    test_pd(url)
    trap.setblocking(False)
    try:
        trap.accept()
        raise AssertionError("the router connected to an image URL")
    except BlockingIOError:
        check(True, "no connection to the image URLs' host: the router never fetched one")
    print("all passed")


if __name__ == "__main__":
    main()
