#!/usr/bin/env python3
"""Where a sparse collective's time goes, from `comm_bench --trace FILE` (every rank's
steps of every call, in µs from the call's first step on any rank).

    python3 scripts/trace-summary.py trace.csv

For each collective and size: the medians (min-max) over the timed calls (comm_bench's
warm-up calls, marked in the trace, are left out) of
  gtopk_allreduce  each tree level's message time (the child's send to the parent's
                   last byte), the parent's cut after it, the encoding before each send,
                   the broadcast (the root's first send to the last rank's last byte),
                   and the call's span;
  broadcast        the same broadcast alone;
  topk_allreduce   each Bruck step's message time (a send to its receiver's last byte,
                   step d bringing the blocks of ranks r+d, …)
                   and what follows the last step (the sum after the gather);
  allgather_v      each Bruck step.
Standard library only, so that it runs on the device machine too.
"""
import argparse
import collections
import csv
import statistics
import sys


def stats(xs):
    return f"{statistics.median(xs):8.1f} ({min(xs):.1f}-{max(xs):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    a = ap.parse_args()
    calls = collections.defaultdict(list)  # (collective, bytes, call) -> steps
    with open(a.trace) as f:
        for r in csv.DictReader(f):
            if r["warmup"] == "1":
                continue
            key = (r["collective"], int(r["bytes"]), int(r["call"]))
            calls[key].append((int(r["rank"]), r["event"], int(r["peer"]), float(r["t_us"])))
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for (coll, size, call), steps in calls.items():
        # (rank, event, peer) -> time; a step happens once per call per peer.
        t = {(rank, ev, peer): us for rank, ev, peer, us in steps}
        g = groups[(coll, size)]
        world = len({rank for rank, *_ in steps})
        g["span"].append(max(us for *_, us in steps))
        for (rank, ev, peer), us in t.items():
            if ev == "up_last_byte":
                level = (peer - rank).bit_length()
                sent = t.get((peer, "up_send", rank))
                if sent is not None:
                    g[f"level {level}: message (send to last byte)"].append(us - sent)
                cut = t.get((rank, "up_cut", peer))
                if cut is not None:
                    g[f"level {level}: cut after it"].append(cut - us)
            elif ev == "up_send":
                before = [v for (r2, e2, _), v in t.items() if r2 == rank and e2 in ("up_cut", "local_top")]
                if before:
                    g["encoding before a send up"].append(us - max(before))
            elif ev == "gather_recv_done":
                # The sender is `peer`, at distance d = peer - rank (mod P) in Bruck's
                # step d; its send of this step is its gather_send to `rank`.
                d = (peer - rank) % world
                sent = t.get((peer, "gather_send", rank))
                if sent is not None:
                    g[f"Bruck step {d}: message (send to last byte)"].append(us - sent)
        down_sends = [us for (rank, ev, _), us in t.items() if ev == "down_send"]
        down_ends = [us for (_, ev, _), us in t.items() if ev == "down_last_byte"]
        if down_sends and down_ends:
            g["broadcast (first send to last byte)"].append(max(down_ends) - min(down_sends))
        if coll == "topk_allreduce":
            for rank in {s[0] for s in steps}:
                last = [us for (r2, e2, _), us in t.items() if r2 == rank and e2 == "gather_recv_done"]
                end = t.get((rank, "end", rank))
                if last and end is not None:
                    g["after the gather's last byte (the sum's rest)"].append(end - max(last))
    if not groups:
        sys.exit(f"{a.trace}: no timed calls")
    for (coll, size), g in sorted(groups.items()):
        print(f"{coll} at {size / 2**20:g} MiB, {len(g['span'])} calls: µs, median (min-max)")
        for name in sorted(g, key=lambda n: (n != "span", n)):
            print(f"  {name:<48} {stats(g[name])}")


if __name__ == "__main__":
    main()
