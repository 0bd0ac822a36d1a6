#!/usr/bin/env python3
"""Estimates a build's wall time on N idle cores from its CPU log (doc/build.md).

Reads the build graph (`ninja -C DIR -t graph TARGET...`) and a tools/build/cpu_log.sh
log of a cold build of the same directory, and replays the build on N workers with
each command taking its logged CPU seconds (what it would take on an idle core).
Prints the critical path (the longest chain of dependent commands) and the replayed
wall time.
Ninja 1.11 starts ready commands in no particular priority; the replay starts the one
with the longest remaining chain first (a good case) and in graph order (ninja-like).

  /usr/bin/python3 tools/build/schedule.py --build build --log cpu.log [-j 2] [TARGET...]
"""
import argparse
import collections
import heapq
import re
import subprocess
import sys


def load_graph(build, targets):
    dot = subprocess.run(["ninja", "-C", build, "-t", "graph", *targets], capture_output=True,
                         text=True, check=True).stdout
    label = {}
    edges = []
    for line in dot.splitlines():
        m = re.match(r'"(0x[0-9a-f]+)" \[label="([^"]*)"(, shape=ellipse)?\]', line)
        if m:
            label[m.group(1)] = (m.group(2), bool(m.group(3)))
            continue
        m = re.match(r'"(0x[0-9a-f]+)" -> "(0x[0-9a-f]+)"(.*)', line)
        if m:
            edges.append((m.group(1), m.group(2), m.group(3)))
    # A job: an ellipse (rule node with several ins/outs) or a labelled direct edge.
    job_in = collections.defaultdict(set)   # job -> input files
    job_out = collections.defaultdict(set)  # job -> output files
    for a, b, rest in edges:
        a_rule = label.get(a, ("", False))[1]
        b_rule = label.get(b, ("", False))[1]
        if b_rule:
            job_in[b].add(a)
        elif a_rule:
            job_out[a].add(b)
        else:  # direct file -> file edge: a one-in one-out job named by its output
            j = ("edge", b)
            job_in[j].add(a)
            job_out[j].add(b)
    producer = {}
    for j, outs in job_out.items():
        for o in outs:
            producer[o] = j
    jobs = {}
    for j in set(job_in) | set(job_out):
        name = sorted(label[o][0] for o in job_out[j])[0] if job_out[j] else str(j)
        deps = {producer[i] for i in job_in[j] if i in producer}
        jobs[j] = (name, deps)
    return jobs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("targets", nargs="*", default=["all"])
    args = ap.parse_args()
    cost = collections.Counter()
    for line in open(args.log):
        p = line.split(None, 3)
        if len(p) == 4 and re.fullmatch(r"[0-9.]+", p[0]):
            cost[p[3].strip()] += float(p[0]) + float(p[1])
    jobs = load_graph(args.build, args.targets)

    def dur(j):
        return cost.get(jobs[j][0], 0.0)

    users = collections.defaultdict(set)
    for j, (_, deps) in jobs.items():
        for d in deps:
            users[d].add(j)
    tail = {}  # longest chain from j to the end, j included

    def chain(j):
        if j not in tail:
            tail[j] = dur(j) + max((chain(u) for u in users[j]), default=0.0)
        return tail[j]

    sys.setrecursionlimit(100000)
    for j in jobs:
        chain(j)
    order = {j: i for i, j in enumerate(sorted(jobs, key=lambda j: jobs[j][0]))}
    total = sum(dur(j) for j in jobs)
    print(f"{len(jobs)} commands, {total:.1f} CPU-s in the log matched to the graph")
    # critical path
    start = max(jobs, key=lambda j: tail[j] if not jobs[j][1] else -1)
    path = [start]
    while users[path[-1]]:
        path.append(max(users[path[-1]], key=lambda u: tail[u]))
    print(f"critical path {tail[start]:.1f} s:")
    for j in path:
        if dur(j) > 0.5:
            print(f"  {dur(j):6.1f}  {jobs[j][0]}")
    for mode in ("longest chain first", "graph order"):
        waiting = {j: len(jobs[j][1]) for j in jobs}
        key = (lambda j: -tail[j]) if mode.startswith("longest") else (lambda j: order[j])
        ready = [(key(j), id(j), j) for j, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        running = []  # (end, id, job)
        now = 0.0
        while ready or running:
            while ready and len(running) < args.j:
                _, _, j = heapq.heappop(ready)
                heapq.heappush(running, (now + dur(j), id(j), j))
            end, _, j = heapq.heappop(running)
            now = end
            for u in users[j]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(ready, (key(u), id(u), u))
        print(f"-j{args.j}, {mode}: {now:.1f} s wall on idle cores")


if __name__ == "__main__":
    main()
