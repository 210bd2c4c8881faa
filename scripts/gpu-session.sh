#!/usr/bin/env bash
# One device call for a session's GPU work, from the prebuilt bundle in .gpu/
# (scripts/gpu-build.sh), in about 6 minutes on an H100/H200:
#   1. scripts/gpu-check.sh: every GPU test, the trainer's --device cuda runs and
#      gpu_step_bench with --breakdown (its own budget: GPU_CHECK_BUDGET, default 230 s);
#   2. a kernel profile of one ResNet-50 step of ours (Nsight Compute, time per kernel,
#      clocks and caches left alone) summarised by kernel family (scripts/gpu-profile.py),
#      and PyTorch's profile of the same step (benchmarks/reference/gpu_step.py --profile);
#   3. the selection references for compress_bench --device cuda: torch.topk, a device
#      copy and torch.sum of a 25,557,032-value gradient (benchmarks/reference/gpu_select.py).
# Everything lands in $OUT (./gpu-logs without it); the summary table prints last.
# Usage (device tool): run(command="bash scripts/gpu-session.sh", carry=[".gpu"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/.."
final="${OUT:-gpu-logs}"
mkdir -p "$final"
export OUT="$final"
GPU_CHECK_BUDGET="${GPU_CHECK_BUDGET:-230}" BENCH_ARGS="${BENCH_ARGS:---breakdown}" \
  bash scripts/gpu-check.sh > "$final/gpu-check.txt" 2>&1
check_rc=$?
source scripts/gpu-env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1 || true)
if [ -n "$ncu" ] && [ -x .gpu/gpu_step_bench ]; then
  timeout -k 5 "${PROFILE_SECS:-90}" "$ncu" --metrics gpu__time_duration.sum --csv \
    --clock-control none --cache-control none --log-file "$final/ncu-resnet50.csv" \
    .gpu/gpu_step_bench --models resnet50 --warmup 0 --repeats 1 --no-reference \
    > "$final/ncu-run.txt" 2>&1
  echo "ncu rc=$?" >> "$final/ncu-run.txt"
  python3 scripts/gpu-profile.py "$final/ncu-resnet50.csv" > "$final/profile-ours.txt" 2>&1
else
  echo "no ncu (or no .gpu/gpu_step_bench): kernel profile skipped" > "$final/profile-ours.txt"
fi
timeout 60 python3 benchmarks/reference/gpu_step.py --model resnet50 --repeats 3 --warmup 2 \
  --profile "$final/profile-torch.txt" > /dev/null 2>> "$final/profile-torch.txt"
timeout 60 python3 benchmarks/reference/gpu_select.py > "$final/select-torch.json" 2>&1
echo "=== our ResNet-50 step by kernel family (ncu) ==="
head -30 "$final/profile-ours.txt"
echo "=== PyTorch's ResNet-50 step (torch.profiler) ==="
head -40 "$final/profile-torch.txt" | cut -c1-160
echo "=== selection references ==="
cat "$final/select-torch.json"
echo "=== gpu-check.sh (rc $check_rc) ==="
tail -60 "$final/gpu-check.txt"
