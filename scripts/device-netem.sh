#!/usr/bin/env bash
# Issue 5's emulated-network measurement on a machine with a core per emulated host (the
# device machine: 16 cores for 8 hosts), in one call, from the bundle that
# scripts/gpu-build.sh makes (.gpu/bin/comm_bench, .gpu/net/{ip,tc,lib}). Prints the
# measured / model table last; logs and CSVs go to $OUT (or ./netem-logs).
#
#   bash scripts/gpu-build.sh        # here
#   run(command="bash scripts/device-netem.sh", carry=[".gpu"])   # the device tool
#
# Configurations, each 1, 16 and 64 MiB gradients at density 0.001, best of 3, with
# TopKAllReduce's allgather alone beside it (comm_bench's allgather_v row):
#   w8-ack-gso22     8 workers, --shaper htb --burst 16kb --ack-prio (ACKs ahead of data),
#                    the kernel's GSO super-packets capped at 22 packets (32 kB): small
#                    messages no longer leave in one uncapped burst, and the kernel still
#                    handles a few packets per pass (RESULTS.md, "Super-packets capped")
#   w8-ack           the same with 64 kB super-packets (the kernel's default)
#   w8-ack-gso1      the same packet at a time, like a NIC's wire
#   w4-ack-gso22     4 workers, as w8-ack-gso22, for paper 002's Figure 9 at few workers
#   wN-ack[-gsoS]    any N workers (1-9) and cap S (1-99): w4-ack and w4-ack-gso1 ran before
#   w8-htb16k (htb 16kb without --ack-prio, RESULTS.md's earlier tables), w8-htb16k-gso1,
#   w8-tbf256k, w4-htb16k-gso1   earlier configurations, on request
# NETEM_CONFIGS="w8-ack w4-ack-gso1" picks a subset; NETEM_SIZES (bytes, comma-separated)
# and NETEM_REPEATS replace the sizes and the 3; NETEM_COLLECTIVES="topk_allreduce,allgather_v"
# times only those rows (comm_bench --collectives; the default has all six, gTopK's
# broadcast alone among them; builds before it have no broadcast row: name the others);
# NETEM_TRACE=1 writes each configuration's timelines of the sparse rows (comm_bench
# --trace) as <config>-trace.csv into the logs and prints scripts/trace-summary.py's
# summary of each before the table;
# NETEM_TIMEOUT (130 s) bounds each configuration's run;
# NETEM_ARGS="--pin" adds netem.sh options (--pin: a core of its own per worker);
# NETEM_BENCH_ARGS="--warmup 2" adds comm_bench flags ("--topk-sum after" times
# TopKAllReduce summing after its gather instead of as the blocks arrive); NETEM_BENCH=.gpu/bin/other_build
# times another build of this tree's comm_bench (it must take --collectives; `GPU_BUILD_BASELINE=<commit>
# bash scripts/gpu-build.sh` bundles that commit's as .gpu/bin/comm_bench-<commit>), for A/B
# comparisons in one call: give each run its own OUT, or the second replaces the first's
# files. Needs root (namespaces).
# The device tool brings back at most 8 files: logs and CSVs go to a scratch folder,
# packed into $OUT/netem-logs.tgz on any exit; the final table goes to
# $OUT/netem-table.txt once every configuration has run (not when the call is cut off).
set -uo pipefail
cd "$(dirname "$0")/.."
final="${OUT:-netem-logs}"
mkdir -p "$final" && final=$(cd "$final" && pwd)
scratch=$(mktemp -d)
out="$scratch/netem-logs"
mkdir -p "$out"
trap 'tar czf "$final/netem-logs.tgz" -C "$scratch" netem-logs 2>/dev/null' EXIT
bench="${NETEM_BENCH:-.gpu/bin/comm_bench}"
[ -x "$bench" ] || { echo "device-netem.sh: no $bench; run scripts/gpu-build.sh first" >&2; exit 2; }
# The carried iproute2 first (the device image has none). Its libraries are given to the
# dynamic loader by --library-path, which, unlike LD_LIBRARY_PATH, does not pass on to the
# benchmark that `ip netns exec` starts.
if [ -x .gpu/net/ip ] && [ -x .gpu/net/tc ]; then
  loader=/lib64/ld-linux-x86-64.so.2
  [ -x "$loader" ] || { echo "device-netem.sh: no $loader to start the carried ip and tc" >&2; exit 2; }
  mkdir -p "$scratch/bin"
  for t in ip tc; do
    printf '#!/bin/sh\nexec %q --library-path %q %q "$@"\n' "$loader" "$PWD/.gpu/net/lib" "$PWD/.gpu/net/$t" > "$scratch/bin/$t"
    chmod +x "$scratch/bin/$t"
  done
  export PATH="$scratch/bin:$PATH"
fi
command -v ip >/dev/null && command -v tc >/dev/null ||
  { echo "device-netem.sh: needs ip and tc (iproute2), carried in .gpu/net or installed" >&2; exit 2; }
ip -V > "$out/machine.txt" 2>&1
echo "cores: $(nproc), kernel: $(uname -r)" >> "$out/machine.txt"

configs="${NETEM_CONFIGS:-w8-ack-gso22 w8-ack w8-ack-gso1 w4-ack-gso22}"
status=0
for cfg in $configs; do
  case "$cfg" in
    w[1-9]-ack | w[1-9]-ack-gso[1-9] | w[1-9]-ack-gso[1-9][0-9])
      # wN-ack[-gsoS]: N workers, htb 16kb with ACKs first, super-packets capped at S.
      w=${cfg#w}; w=${w%%-*}
      opts=(--workers "$w" --shaper htb --burst 16kb --ack-prio)
      case "$cfg" in *-gso*) opts+=(--gso-segs "${cfg##*-gso}") ;; esac ;;
    w8-htb16k) opts=(--workers 8 --shaper htb --burst 16kb) ;;
    w8-htb16k-gso1) opts=(--workers 8 --shaper htb --burst 16kb --gso-segs 1) ;;
    w8-tbf256k) opts=(--workers 8) ;;
    w4-htb16k-gso1) opts=(--workers 4 --shaper htb --burst 16kb --gso-segs 1) ;;
    *) echo "device-netem.sh: unknown configuration $cfg" >&2; status=2; continue ;;
  esac
  # NETEM_ARGS: more netem.sh options for every configuration (e.g. --pin).
  opts+=(${NETEM_ARGS:-})
  echo "== $cfg: netem.sh ${opts[*]}"
  rm -f "$out/$cfg.csv"
  trace=()
  [ "${NETEM_TRACE:-0}" = 1 ] && trace=(--trace "$out/$cfg-trace.csv")
  # 4 × 130 s stays under the device tool's 600 s per call (a run took 12 s on the
  # 16-core device machine at the defaults, 25 s with NETEM_SIZES=16777216,67108864
  # NETEM_REPEATS=8; 30-60 s on 2 cores).
  timeout "${NETEM_TIMEOUT:-130}" bash scripts/netem.sh "${opts[@]}" -- "$bench" --no-reference --collectives "${NETEM_COLLECTIVES:-socket_copy,allreduce,topk_allreduce,gtopk_allreduce,allgather_v,broadcast}" ${NETEM_BENCH_ARGS:-} ${trace[@]+"${trace[@]}"} \
    --sizes "${NETEM_SIZES:-1048576,16777216,67108864}" --repeats "${NETEM_REPEATS:-3}" --csv "$out/$cfg.csv" \
    > "$out/$cfg.log" 2>&1
  rc=$?
  grep -v "quantum of class" "$out/$cfg.log" | tail -n 20
  [ $rc -ne 0 ] && { echo "device-netem.sh: $cfg exited with $rc" >&2; status=1; }
done

# The timelines' summaries (scripts/trace-summary.py), where traced.
for cfg in $configs; do
  [ -f "$out/$cfg-trace.csv" ] || continue
  echo "--- $cfg: where the sparse collectives' time goes (comm_bench --trace) ---"
  python3 scripts/trace-summary.py "$out/$cfg-trace.csv" | tee "$out/$cfg-trace-summary.txt"
done
echo "--- $(tr '\n' ' ' < "$out/machine.txt")"
echo "--- measured / α-β model (fitted in the same run) ---"
python3 - "$out" $configs <<'EOF' | tee "$final/netem-table.txt"
import csv, sys, os
out, configs = sys.argv[1], sys.argv[2:]
print(f"{'config':<16} {'collective':<16} {'MiB':>6} {'measured ms':>12} {'model ms':>10} {'ratio':>6} {'faults':>7} {'stops':>5} {'skips':>5}")
for cfg in configs:
    path = os.path.join(out, cfg + ".csv")
    if not os.path.exists(path):
        print(f"{cfg:<16} (no CSV: see {cfg}.log)")
        continue
    for r in csv.DictReader(open(path)):
        m, p = float(r["measured_s"]), r["predicted_s"]
        p = float(p) if p not in ("", "null") else None
        ratio = f"{m / p:6.2f}" if p else "     -"
        model = f"{p * 1e3:10.3f}" if p else "         -"
        # Minor page faults per call (slowest-faulting rank); builds before it had none.
        f = r.get("minor_faults_per_call") or ""
        faults = f"{float(f):7.0f}" if f not in ("", "null") else "      -"
        # TopK's sums that stopped merging as the blocks arrived (all ranks' calls).
        st = r.get("topk_arrival_stops") or ""
        stops = f"{st:>5}" if st not in ("", "null") else "    -"
        # And those that did not try, after stops (builds before the backoff had none).
        sk = r.get("topk_arrival_skips") or ""
        skips = f"{sk:>5}" if sk not in ("", "null") else "    -"
        print(f"{cfg:<16} {r['collective']:<16} {int(r['bytes']) / 2**20:>6.4g} {m * 1e3:12.3f} {model} {ratio} {faults} {stops} {skips}")
EOF
# The table's own failure (a traceback on a CSV it cannot read) fails the script too.
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "device-netem.sh: the table could not be made" >&2; status=1; }
exit $status
