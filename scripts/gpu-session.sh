#!/usr/bin/env bash
# One device call for a session's GPU work, from the prebuilt bundle in .gpu/
# (scripts/gpu-build.sh), in at most about 7 minutes on an H100/H200:
#   1. scripts/gpu-check.sh over GPU_CHECK_ONLY (default below: the GPU tests of the
#      methods on tensors, quantization and selection against the CPU, ProcessGroup's
#      compositions and NCCL; compress_bench --device cuda; each method trained over TCP
#      and over NCCL to one loss; every method in a 2-process job over TCP with identical
#      parameters on both ranks), under GPU_CHECK_BUDGET seconds (default 400);
#   2. with PROFILE=1 (not in the same call: it needs about 4 minutes more), kernel
#      profiles (Nsight Compute, time per kernel, clocks and caches left alone) of
#      compress_bench's compression kernels and of one ResNet-50 training step, and
#      PyTorch's profile of the same step (benchmarks/reference/gpu_step.py --profile).
# Everything lands in $OUT (./gpu-logs without it, at most 8 files); the summary prints last.
# Usage (device tool): run(command="bash scripts/gpu-session.sh", carry=[".gpu"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/.."
final="${OUT:-gpu-logs}"
mkdir -p "$final"
export OUT="$final"
# What matters most first (a budget cut falls on the rest): the GPU tests of the methods
# on tensors and the collectives, the compression benchmark, then each method trained over
# TCP and over NCCL (one rank: the same loss), then in a 2-process job over TCP
# (identical parameters on both ranks). The op-by-op and model tests and gpu_step_bench
# (unchanged since their last GPU run) run when named in GPU_CHECK_ONLY.
default_runs="tensor-quantize compress-exchange-tensor comm-group comm-nccl tensor-sparsify compress-dgc-device \
compress_bench \
train-resnet20-dgc-tcp train-resnet20-dgc-nccl train-resnet20-gtopk-tcp train-resnet20-gtopk-nccl \
train-resnet20-topk-tcp train-resnet20-topk-nccl train-resnet20-sbc-tcp train-resnet20-sbc-nccl \
train-resnet20-qsgd-tcp train-resnet20-qsgd-nccl train-resnet20-terngrad-tcp train-resnet20-terngrad-nccl \
train-resnet20-onebit-tcp train-resnet20-onebit-nccl train-resnet20-fedavg-tcp train-resnet20-fedavg-nccl \
train-resnet20-signsgd-tcp train-resnet20-signsgd-nccl train-resnet20-randomk-tcp train-resnet20-randomk-nccl \
train-resnet20-thresholdv-tcp train-resnet20-thresholdv-nccl \
train2-resnet20-dense train2-resnet20-dense-bf16 train2-resnet20-dgc train2-resnet20-dgc-buckets train2-resnet20-gtopk train2-resnet20-topk \
train2-resnet20-local train2-resnet20-sbc train2-resnet20-qsgd train2-resnet20-terngrad \
train2-resnet20-onebit train2-resnet20-fedavg train2-resnet20-powersgd train2-resnet20-signsgd \
train2-resnet20-signum train2-resnet20-efsignsgd train2-resnet20-randomk train2-resnet20-thresholdv"
GPU_CHECK_ONLY="${GPU_CHECK_ONLY:-$default_runs}" GPU_CHECK_BUDGET="${GPU_CHECK_BUDGET:-400}" \
  BENCH_ARGS="${BENCH_ARGS:---breakdown --exchange dense,dgc}" bash scripts/gpu-check.sh > "$final/gpu-check.txt" 2>&1
check_rc=$?
source scripts/gpu-env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1 || true)
profile() { # NAME SECONDS CMD...: ncu over CMD into NAME.csv, its summary appended to profile-ours.txt
  local name=$1 secs=$2
  shift 2
  if [ -z "$ncu" ] || [ ! -x "$1" ]; then
    echo "=== $name: no ncu or no $1; not profiled" >> "$final/profile-ours.txt"
    return
  fi
  timeout -k 5 "$secs" "$ncu" --metrics gpu__time_duration.sum --csv --clock-control none \
    --cache-control none "${kernel_filter[@]}" --log-file "$final/ncu-$name.csv" "$@" > /dev/null 2>&1
  echo "=== $name (ncu rc $?) ===" >> "$final/profile-ours.txt"
  python3 scripts/gpu-profile.py "$final/ncu-$name.csv" >> "$final/profile-ours.txt" 2>&1
}
# The kernel profiles (about 4 minutes) only with PROFILE=1: with the default runs above
# they would not fit one call.
if [ "${PROFILE:-0}" = 1 ]; then
  kernel_filter=(-k 'regex:mag_|gather_strided|sum_sq|dgc_acc|zero_at')
  profile compress "${PROFILE_SECS:-70}" .gpu/compress_bench --device cuda --repeats 5
  kernel_filter=()
  profile resnet50 "${PROFILE_SECS:-90}" .gpu/gpu_step_bench --models resnet50 --warmup 0 --repeats 1 --no-reference
  timeout 60 python3 benchmarks/reference/gpu_step.py --model resnet50 --repeats 3 --warmup 2 \
    --profile "$final/profile-torch.txt" > /dev/null 2>> "$final/profile-torch.txt"
  echo "=== our kernels by family (ncu) ==="
  cat "$final/profile-ours.txt"
  echo "=== PyTorch's ResNet-50 step (torch.profiler; CUDA columns) ==="
  head -30 "$final/profile-torch.txt" | cut -c1-92,150-240
fi
echo "=== gpu-check.sh (rc $check_rc) ==="
tail -70 "$final/gpu-check.txt"
