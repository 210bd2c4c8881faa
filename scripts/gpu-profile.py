"""Summarises an `ncu --csv --metrics gpu__time_duration.sum` log of one training step by
kernel family: total GPU time, launches and share, largest first. Families fold the
type suffix and cuBLAS/cuDNN tile names (sm90_xmma_gemm_..., ampere_sgemm_...) into one
row each, so a per-layer-type split can be read off.

Usage: python3 scripts/gpu-profile.py NCU_CSV [--top 40]
"""
import argparse
import csv
import collections
import re
import sys

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("csv")
parser.add_argument("--top", type=int, default=40)
args = parser.parse_args()


def family(name):
    n = name.split("(")[0].strip()
    n = re.sub(r"^void ", "", n)
    n = re.sub(r"<.*", "", n)
    if "gemm" in n.lower() or "xmma" in n.lower():
        return "gemm (cuBLAS)"
    return re.sub(r"_(f32|f64|u32)$", "", n)


rows = []
with open(args.csv, newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
    rows.append((family(r["Kernel Name"]), v * scale))
if not rows:
    sys.exit("no gpu__time_duration.sum rows in " + args.csv)
tot = collections.defaultdict(float)
cnt = collections.Counter()
for k, ms in rows:
    tot[k] += ms
    cnt[k] += 1
all_ms = sum(tot.values())
print(f"{len(rows)} kernels, {all_ms:.2f} ms of GPU time in all")
print(f"{'family':<48} {'ms':>9} {'share':>6} {'launches':>8}")
for k, ms in sorted(tot.items(), key=lambda x: -x[1])[: args.top]:
    print(f"{k[:48]:<48} {ms:9.3f} {100 * ms / all_ms:5.1f}% {cnt[k]:8d}")
