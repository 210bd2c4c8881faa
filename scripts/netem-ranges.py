#!/usr/bin/env python3
"""The spread of measured / model over repeated runs of scripts/device-netem.sh, against
issue 5's bound (within 30 % of the alpha-beta model at 1 MiB and above).

    python3 scripts/netem-ranges.py RUN_DIR/netem-table.txt ... [--bound 0.3]

Each file is one run's final table (device-netem.sh writes $OUT/netem-table.txt). Prints,
per configuration, collective and size, the runs, the smallest, median and largest
ratio, and how many runs fell outside [1 - bound, 1 + bound]: the issue's three
collectives at 1 MiB and above are judged; the other rows (the socket copy, TopK's
gather and gTopK's broadcast alone) and smaller sizes are listed only. Standard library only, so that it runs on the device machine.
"""
import argparse
import collections
import statistics


# Issue 5's three collectives.
JUDGED = ("allreduce", "topk_allreduce", "gtopk_allreduce")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+")
    ap.add_argument("--bound", type=float, default=0.3)
    a = ap.parse_args()
    lo, hi = 1 - a.bound, 1 + a.bound
    ratios = collections.defaultdict(list)
    for path in a.tables:
        with open(path) as f:
            for line in f:
                cols = line.split()
                # config collective MiB measured model ratio [faults stops skips]
                if len(cols) < 6 or cols[0] == "config":
                    continue
                try:
                    mib, ratio = float(cols[2]), float(cols[5])
                except ValueError:
                    continue  # a row without a model ("-") or a note
                ratios[(cols[0], cols[1], mib)].append(ratio)
    print(f"{'config':<16} {'collective':<16} {'MiB':>6} {'runs':>4} {'min':>6} {'median':>6} {'max':>6}  outside {lo:.2f}-{hi:.2f}")
    bad = 0
    for (cfg, coll, mib), rs in sorted(ratios.items()):
        judged = mib >= 1 and coll in JUDGED
        out = sum(not lo <= r <= hi for r in rs) if judged else 0
        bad += out
        note = f"{out}" if judged else "(not judged)"
        print(f"{cfg:<16} {coll:<16} {mib:>6.4g} {len(rs):>4} {min(rs):>6.2f} {statistics.median(rs):>6.2f} {max(rs):>6.2f}  {note}")
    print(f"runs of {', '.join(JUDGED)} outside the bound at 1 MiB and above: {bad}")


if __name__ == "__main__":
    main()
