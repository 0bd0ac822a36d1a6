#!/usr/bin/python3
"""Peer test: publish KV events from Python exactly as vLLM's and SGLang's
ZmqEventPublisher put them on the wire, and check that our C++ ingestion (the
kv_events_probe driver) ends up with the publisher's true block set.

Wire (doc/kv-events.md): PUB frames [topic, seq as 8-byte big-endian, msgpack payload];
replay ROUTER: request [identity, b"", start_seq 8B BE] -> [identity, b"", seq, payload]
per buffered batch with seq >= start, then [identity, b"", (-1).to_bytes(8, signed), b""].

Payloads are built as msgspec encodes vLLM's / SGLang's structs:
  vllm        map batch {"ts", "events", "data_parallel_rank"}, tagged-map events,
              signed int hashes (Python hash() values)
  vllm-bytes  as vllm with 32-byte bytes hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)
  sglang      array batch [ts, events], tagged-array events, signed int hashes

Usage: peer_publisher.py --probe PATH --shape vllm|vllm-bytes|sglang
Exits 0 on success. Uses only python3-zmq and python3-msgpack (Debian).
"""
import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import msgpack
import zmq

BLOCK_SIZE = 16
TOPIC = "kv-events"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class EngineModel:
    """A prefix cache with leaf-first LRU eviction; emits vLLM-style events."""

    def __init__(self, rng, shape, capacity=150):
        self.rng = rng
        self.shape = shape
        self.capacity = capacity
        self.blocks = {}  # prefix tuple -> dict(hash, children, used)
        self.clock = 0
        self.docs = [[rng.randrange(50000) for _ in range(8 * BLOCK_SIZE)] for _ in range(6)]

    def new_hash(self):
        if self.shape == "vllm-bytes":
            return self.rng.randbytes(32)
        return self.rng.randrange(-(2**63), 2**63)  # Python hash() values are signed

    def request(self):
        doc = self.rng.choice(self.docs)
        shared = self.rng.randrange(1, 9) * BLOCK_SIZE
        tokens = doc[:shared] + [self.rng.randrange(50000) for _ in range(
            self.rng.randrange(0, 3) * BLOCK_SIZE)]
        self.clock += 1
        hashes, toks, parent = [], [], None
        for i in range(len(tokens) // BLOCK_SIZE):
            prefix = tuple(tokens[:(i + 1) * BLOCK_SIZE])
            block = self.blocks.get(prefix)
            if block is not None:
                block["used"] = self.clock
                if not hashes:
                    parent = block["hash"]
                continue
            h = self.new_hash()
            self.blocks[prefix] = {"hash": h, "children": 0, "used": self.clock}
            if i > 0:
                self.blocks[tuple(tokens[:i * BLOCK_SIZE])]["children"] += 1
            hashes.append(h)
            toks.extend(tokens[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE])
        if not hashes:
            return None
        return ("BlockStored", hashes, parent, toks)

    def evict(self):
        removed = []
        while len(self.blocks) > self.capacity:
            leaf = min((b["used"], p) for p, b in self.blocks.items() if b["children"] == 0)[1]
            removed.append(self.blocks.pop(leaf)["hash"])
            if len(leaf) > BLOCK_SIZE:
                self.blocks[leaf[:-BLOCK_SIZE]]["children"] -= 1
        return ("BlockRemoved", removed) if removed else None

    def clear(self):
        self.blocks.clear()
        return ("AllBlocksCleared",)


def encode_event(shape, ev, extras):
    kind = ev[0]
    if shape == "sglang":
        if kind == "BlockStored":
            # SGLang BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id)
            return [kind, ev[1], ev[2], ev[3], BLOCK_SIZE, None]
        if kind == "BlockRemoved":
            return [kind, ev[1]]
        return [kind]
    # vLLM: msgspec tagged map; fields without defaults always present, defaulted
    # fields (extra_keys, group_idx, kv_cache_spec_*) only when not the default.
    if kind == "BlockStored":
        m = {"type": kind, "block_hashes": ev[1], "parent_block_hash": ev[2],
             "token_ids": ev[3], "block_size": BLOCK_SIZE, "lora_id": None,
             "medium": "GPU", "lora_name": None}
        if extras:
            m["extra_keys"] = [None] * len(ev[1])
            m["group_idx"] = 0
            m["kv_cache_spec_kind"] = "full_attention"
        return m
    if kind == "BlockRemoved":
        return {"type": kind, "block_hashes": ev[1], "medium": "GPU"}
    return {"type": kind}


def encode_batch(shape, ts, events):
    if shape == "sglang":
        return msgpack.packb([ts, events], use_bin_type=True)
    return msgpack.packb({"ts": ts, "events": events, "data_parallel_rank": 0},
                         use_bin_type=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--shape", required=True, choices=["vllm", "vllm-bytes", "sglang"])
    ap.add_argument("--batches", type=int, default=120)
    args = ap.parse_args()
    rng = random.Random(1234)
    model = EngineModel(rng, args.shape)

    # The whole stream and the final truth are decided up front.
    payloads = []
    for i in range(args.batches):
        events = []
        if i == args.batches // 2:
            events.append(encode_event(args.shape, model.clear(), False))
        for _ in range(3):
            ev = model.request()
            if ev:
                events.append(encode_event(args.shape, ev, extras=(i % 7 == 0)))
        ev = model.evict()
        if ev:
            events.append(encode_event(args.shape, ev, False))
        payloads.append(encode_batch(args.shape, 1700000000.0 + i * 0.01, events))
    skipped_live = {5, 17, 18, 19, args.batches - 10}  # deliberate gaps: replay only
    last_seq = args.batches - 1

    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 100000)
    pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
    replay = ctx.socket(zmq.ROUTER)
    replay_port = replay.bind_to_random_port("tcp://127.0.0.1")
    buffer = collections.deque(maxlen=10000)

    with tempfile.NamedTemporaryFile("w", suffix=".expect", delete=False) as f:
        for prefix in model.blocks:
            f.write(" ".join(map(str, prefix)) + "\n")
        expect_path = f.name

    probe = subprocess.Popen(
        [args.probe, "--events", f"tcp://127.0.0.1:{pub_port}",
         "--replay", f"tcp://127.0.0.1:{replay_port}", "--topic", TOPIC,
         "--block-size", str(BLOCK_SIZE), "--last-seq", str(last_seq),
         "--expect", expect_path, "--timeout-s", "60"],
        stdout=subprocess.PIPE, text=True)

    def service_replay():
        # As vLLM's _service_replay: 3 frames in, every buffered batch >= start out, end marker.
        while replay.poll(0):
            frame = replay.recv_multipart()
            if len(frame) != 3:
                continue
            client_id, _, start_seq_bytes = frame
            start_seq = int.from_bytes(start_seq_bytes, "big")
            for seq, buf in buffer:
                if seq >= start_seq:
                    replay.send_multipart((client_id, b"", seq.to_bytes(8, "big"), buf))
            replay.send_multipart((client_id, b"", END_SEQ, b""))

    seq = 0
    deadline = time.time() + 90
    topic = TOPIC.encode("utf-8")
    while probe.poll() is None and time.time() < deadline:
        service_replay()
        if seq < len(payloads):
            payload = payloads[seq]
        else:
            # After the scripted stream: empty batches keep the stream alive so a
            # late subscriber still sees live messages (and replays what it missed).
            payload = encode_batch(args.shape, time.time(), [])
        if seq not in skipped_live:
            pub.send_multipart((topic, seq.to_bytes(8, "big"), payload))
        buffer.append((seq, payload))
        seq += 1
        time.sleep(0.002 if seq < len(payloads) else 0.02)
    if probe.poll() is None:
        probe.kill()
        print("FAIL: probe did not finish", file=sys.stderr)
        return 1
    out = probe.stdout.read().strip()
    os.unlink(expect_path)
    print(f"[{args.shape}] published {seq} batches; probe: {out}")
    try:
        result = json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        print("FAIL: no result from probe", file=sys.stderr)
        return 1
    ok = (probe.returncode == 0 and result["equal"] and result["reached_last_seq"]
          and result["decode_errors"] == 0 and result["gaps"] >= 1 and result["replays"] >= 1
          and result["resyncs"] == 0 and result["expected_blocks"] > 0)
    print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
