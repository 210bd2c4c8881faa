#!/usr/bin/env bash
# Runs the prebuilt GPU test executables (and any benchmark binary) carried in .gpu/ on a
# machine with a GPU and no Rust toolchain, and prints a summary table last.
#
# On the development machine: bash scripts/gpu-build.sh (it fills .gpu/ and stamps it with
# the source it was built from); then, on the GPU machine: bash scripts/gpu-check.sh (the
# device tool: carry [".gpu"]).
#
# Executables named *bench* run without test-harness flags; all others are libtest
# binaries and run with --test-threads=1 --nocapture (the GPU-vs-CPU errors are printed).
#
# One device call is at most 10 minutes and brings back at most 8 files, so:
# - every run has a time limit, and all of them share GPU_CHECK_BUDGET seconds (default
#   540); a run that would start with under 20 s left is skipped and says so.
#   GPU_CHECK_ONLY="nn-cuda-models train-deepspeech-cuda" runs only the runs named (a
#   second call for what the first skipped), the executables in the order named; a name
#   that matches no run fails the check;
# - each summary row is printed as its run ends, so a call cut off still shows them;
# - the logs are written to a scratch folder and packed into $OUT/gpu-logs.tgz, with the
#   rows in $OUT/summary.txt, on any exit (./gpu-logs without $OUT).
# Exit status: 0 when every run passed and the bundle matches the source tree.
set -uo pipefail
cd "$(dirname "$0")/.."
final="${OUT:-gpu-logs}"
mkdir -p "$final"
scratch=$(mktemp -d)
out="$scratch/gpu-logs"
mkdir -p "$out"
summary=()
status=0
pack() {
  printf '%s\n' "${summary[@]}" > "$final/summary.txt"
  tar czf "$final/gpu-logs.tgz" -C "$scratch" gpu-logs 2>/dev/null
}
trap pack EXIT
row() {
  summary+=("$1")
  echo "$1"
}

# The bundle must have been built from this source tree (gpu-build.sh stamps it).
source_hash() { bash scripts/source-hash.sh; }
here=$(source_hash)
if [ -f .gpu/SOURCE ]; then
  built=$(awk '/^source/ { print $2 }' .gpu/SOURCE)
  row "bundle: $(tr '\n' ' ' < .gpu/SOURCE)"
  if [ "$built" != "$here" ]; then
    row "STALE bundle: built from source $built, this tree is $here (run scripts/gpu-build.sh)"
    status=1
  fi
else
  row "bundle: no .gpu/SOURCE stamp (built by an older gpu-build.sh); this tree is $here"
  status=1
fi

budget=${GPU_CHECK_BUDGET:-540}
t0=$(date +%s)
# wanted NAME: whether GPU_CHECK_ONLY (if set) names the run. Every run asks, so
# `considered` ends up listing them all, against which GPU_CHECK_ONLY's names are checked.
considered=" "
wanted() {
  considered+="$1 "
  [ -z "${GPU_CHECK_ONLY:-}" ] && return 0
  [[ " $GPU_CHECK_ONLY " == *" $1 "* ]]
}
# limit SECONDS: the run's own limit cut to what is left of the budget; empty when under
# 20 s are left.
limit() {
  local left=$(( budget - ($(date +%s) - t0) - 5 ))
  [ "$left" -lt 20 ] && return 1
  echo $(( $1 < left ? $1 : left ))
}
# timed NAME SECONDS CMD...: runs CMD with a limit, its output in $out/NAME.log; sets rc
# (124: timed out) and ms.
timed() {
  local name=$1 lim=$2
  shift 2
  local start
  start=$(date +%s%N)
  timeout -k 10 "$lim" "$@" > "$out/$name.log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  [ $rc -ne 0 ] && status=1
  [ $rc -eq 124 ] && echo "(timed out after ${lim} s)" >> "$out/$name.log"
  return 0
}
skip() {
  row "$(printf '%-26s skipped: under 20 s of the %s s budget left' "$1" "$budget")"
  status=1
}

# The CUDA libraries on the library path (NVRTC, cuBLAS, NCCL from pip; the driver from
# the system).
source scripts/gpu-env.sh
export REQUIRE_GPU=1 REQUIRE_NVRTC=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || echo "nvidia-smi unavailable" > "$out/gpu.txt"

shopt -s nullglob
exes=(.gpu/*)
# With GPU_CHECK_ONLY, the executables run in the order it names them (what matters most
# first, so that a budget cut falls on the rest).
if [ -n "${GPU_CHECK_ONLY:-}" ]; then
  exes=()
  for w in $GPU_CHECK_ONLY; do [ -f ".gpu/$w" ] && exes+=(".gpu/$w"); done
  [ ${#exes[@]} -eq 0 ] && exes=(.gpu/*)
fi
if [ ${#exes[@]} -eq 0 ]; then
  echo "no executables in .gpu/ (run scripts/gpu-build.sh)" >&2
  exit 2
fi
# Each executable's limit: the op-by-op tests take longest.
own_limit() {
  case "$1" in
    tensor-cuda) echo 200 ;;
    nn-cuda-models) echo 150 ;;
    gpu_step_bench) echo 240 ;;
    *bench*) echo 150 ;;
    *) echo 90 ;;
  esac
}
for exe in "${exes[@]}"; do
  [ -f "$exe" ] && [ -x "$exe" ] || continue
  name=$(basename "$exe")
  wanted "$name" || continue
  lim=$(limit "$(own_limit "$name")") || { skip "$name"; continue; }
  case "$name" in
    # compress_bench times the GPU side only with --device cuda (and not BENCH_ARGS).
    compress_bench) timed "$name" "$lim" "$exe" --device cuda --repeats 20 ;;
    # BENCH_ARGS (e.g. --breakdown) goes to every other benchmark binary.
    *bench*) timed "$name" "$lim" "$exe" ${BENCH_ARGS:-} ;;
    *) timed "$name" "$lim" "$exe" --test-threads=1 --nocapture ;;
  esac
  passed=$(grep -o '[0-9]* passed' "$out/$name.log" | tail -1)
  failed=$(grep -o '[0-9]* failed' "$out/$name.log" | tail -1)
  row "$(printf '%-26s rc=%-3s %-11s %-9s %8s ms' "$name" "$rc" "${passed:--}" "${failed:--}" "$ms")"
done

# The trainer on the GPU, when its binary is carried as .gpu/bin/train.
if [ -x .gpu/bin/train ]; then
  # Two workers share GPU 0 (each its own context) and train ResNet-20 on synthetic
  # images with DGC.
  name=train-resnet20-dgc-cuda
  if wanted "$name"; then
    if lim=$(limit 120); then
      timed "$name" "$lim" .gpu/bin/train --workers 2 --model resnet20 --dataset synthetic \
        --device cuda --method dgc --method-opt warmup_epochs=0 --batch-size 64 --steps 60 \
        --out "$out/$name"
      row "$(printf '%-26s rc=%-3s %-21s %8s ms' "$name" "$rc" "60 steps" "$ms")"
    else
      skip "$name"
    fi
  fi

  # --backend nccl (dense, gradients averaged on the GPU) against --backend tcp (copied to
  # the host) on one GPU: world size 1, the only one a one-GPU machine allows, so both
  # averages are the identity and the two runs must end with the same loss.
  loss_tcp=none loss_nccl=none
  for be in tcp nccl; do
    name=train-resnet20-dense-$be
    wanted "$name" || continue
    lim=$(limit 90) || { skip "$name"; continue; }
    timed "$name" "$lim" .gpu/bin/train --workers 1 --model resnet20 --dataset synthetic \
      --device cuda --backend "$be" --method dense --batch-size 64 --steps 20 --log-every 5 \
      --out "$out/$name"
    loss=$(grep -o '"final_loss": *[-0-9.e]*' "$out/$name/summary.json" 2>/dev/null | grep -o '[-0-9.e]*$')
    row "$(printf '%-26s rc=%-3s %-21s %8s ms' "$name" "$rc" "loss ${loss:--}" "$ms")"
    eval "loss_$be=\${loss:-none}"
  done
  if wanted train-resnet20-dense-tcp && wanted train-resnet20-dense-nccl; then
    if [ "$loss_tcp" != "$loss_nccl" ] || [ "$loss_tcp" = none ]; then
      status=1
      row "nccl vs tcp final loss differ: $loss_nccl vs $loss_tcp"
    fi
  fi

  # Every method with one worker two ways: over TCP (the method's host code on values
  # copied from the GPU) and over NCCL (its tensor code on the GPU). The two give the
  # same results bit for bit and one rank's sum is its own message, so each method's two
  # runs must end with the same loss.
  for method in dgc gtopk topk sbc qsgd terngrad onebit fedavg signsgd randomk thresholdv; do
    losses=""
    for way in tcp nccl; do
      name=train-resnet20-$method-$way
      wanted "$name" || continue
      lim=$(limit 90) || { skip "$name"; continue; }
      case "$way" in
        tcp) flags=() ;;
        nccl) flags=(--backend nccl) ;;
      esac
      case "$method" in
        dgc) opts=(--method-opt warmup_epochs=0) ;;
        gtopk | topk) opts=(--method-opt density=0.01) ;;
        sbc) opts=(--method-opt delay=5 --method-opt density=0.01) ;;
        fedavg) opts=(--method-opt delay=5) ;;
        qsgd) opts=(--method-opt min_size=1000) ;;
        randomk) opts=(--method-opt density=0.01) ;;
        thresholdv) opts=(--method-opt threshold=0.001) ;;
        terngrad | onebit | signsgd) opts=() ;;
      esac
      timed "$name" "$lim" .gpu/bin/train --workers 1 --model resnet20 --dataset synthetic \
        --device cuda "${flags[@]}" --method "$method" "${opts[@]}" --batch-size 64 \
        --steps 20 --log-every 5 --out "$out/$name"
      loss=$(grep -o '"final_loss": *[-0-9.e]*' "$out/$name/summary.json" 2>/dev/null | grep -o '[-0-9.e]*$')
      row "$(printf '%-26s rc=%-3s %-21s %8s ms' "$name" "$rc" "loss ${loss:--}" "$ms")"
      losses="$losses ${loss:-none}"
    done
    if [ -n "$losses" ] && [ "$(tr ' ' '\n' <<<"$losses" | sed '/^$/d' | sort -u | wc -l)" != 1 ]; then
      status=1
      row "$method final losses differ between TCP and NCCL:$losses"
    fi
  done

  # Every method in a 2-process job on one GPU over TCP (two contexts taking turns; the
  # methods' host code, the tensor code over TCP being compress-exchange-tensor's): both
  # ranks must end with the same parameters bit for bit, and the summary's compression
  # ratio is printed beside the method. dense-bf16 is dense with bfloat16 on the ring;
  # dgc-buckets is DGC with --bucket-elems (the small tensors exchanged as one).
  for method in dense dense-bf16 dgc dgc-buckets gtopk topk local sbc qsgd terngrad onebit fedavg powersgd signsgd \
    signum efsignsgd randomk thresholdv; do
    name=train2-resnet20-$method
    wanted "$name" || continue
    lim=$(limit 90) || { skip "$name"; continue; }
    case "$method" in
      dgc) opts=(--method-opt warmup_epochs=0) ;;
      dense-bf16) opts=(--method-opt wire=bf16) ;;
      dgc-buckets) opts=(--method-opt warmup_epochs=0 --bucket-elems 20000) ;;
      gtopk | topk) opts=(--method-opt density=0.01) ;;
      local) opts=(--method-opt density=0.01 --method-opt sync_every=5) ;;
      sbc) opts=(--method-opt delay=5 --method-opt density=0.01) ;;
      fedavg) opts=(--method-opt delay=5) ;;
      qsgd) opts=(--method-opt min_size=1000) ;;
      powersgd) opts=(--method-opt rank=2 --method-opt start_iter=2) ;;
      randomk) opts=(--method-opt density=0.01) ;;
      thresholdv) opts=(--method-opt threshold=0.001) ;;
      *) opts=() ;;
    esac
    timed "$name" "$lim" .gpu/bin/train --workers 2 --model resnet20 --dataset synthetic \
      --device cuda --method "${method%-*}" "${opts[@]}" --batch-size 32 \
      --steps 12 --log-every 4 --out "$out/$name"
    same=$(python3 scripts/same-params.py "$out/$name" 2 2>&1) || status=1
    ratio=$(grep -o '"message_compression_ratio": *[-0-9.e]*' "$out/$name/summary.json" 2>/dev/null | grep -o '[-0-9.e]*$')
    row "$(printf '%-26s rc=%-3s ratio %-9s %8s ms  %s' "$name" "$rc" "${ratio:--}" "$ms" "$same")"
  done

  # DeepSpeech on synthetic utterances of different lengths: padded batches through
  # forward_lengths (frame masks and reversal within each length on the GPU) and CTC.
  name=train-deepspeech-cuda
  if wanted "$name"; then
    if lim=$(limit 90); then
      timed "$name" "$lim" .gpu/bin/train --workers 1 --model deepspeech --hidden 64 \
        --layers 2 --dataset synthetic --device cuda --batch-size 4 --steps 6 \
        --log-every 2 --out "$out/$name"
      row "$(printf '%-26s rc=%-3s %-21s %8s ms' "$name" "$rc" "6 steps" "$ms")"
    else
      skip "$name"
    fi
  fi
fi

# A misspelt name in GPU_CHECK_ONLY would otherwise run nothing and pass.
for w in ${GPU_CHECK_ONLY:-}; do
  if [[ "$considered" != *" $w "* ]]; then
    row "GPU_CHECK_ONLY names no run: $w (runs:$considered)"
    status=1
  fi
done

# The GPU-vs-CPU comparison lines, for the record.
grep -h "^GPU-vs-CPU" "$out"/*.log > "$out/errors.txt" 2>/dev/null || true
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "--- GPU-vs-CPU worst errors ---"
cat "$out/errors.txt"
echo "--- failures ---"
grep -h -A3 "^---- \|panicked at" "$out"/*.log | head -40 || true
for log in "$out"/*bench*.log "$out"/train-*.log; do
  [ -f "$log" ] || continue
  echo "--- $(basename "$log" .log) (last lines) ---"
  grep -h "forward .* backward" "$log" || true
  case "$log" in
    *compress_bench*) tail -n 14 "$log" ;;
    *) tail -n 6 "$log" | grep -v "^{" ;;
  esac
done
echo "GPU: $(cat "$out/gpu.txt")"
printf '%s\n' "--- summary ---" "${summary[@]}"
echo "(logs: $final/gpu-logs.tgz)"
exit $status
