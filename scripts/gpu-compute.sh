#!/usr/bin/env bash
# Issue 37's device call (GPU compute at PyTorch's speed), from the prebuilt bundle in
# .gpu/ (scripts/gpu-build.sh), in at most about 8 minutes on an H100/H200:
#   1. scripts/gpu-check.sh over the op-by-op GPU-vs-CPU tests (convolutions now through
#      cuDNN, the kernels' fault reports, `training_step_does_not_synchronise`), the
#      model-level checks, and gpu_step_bench --breakdown against PyTorch (cuDNN and the
#      caching pool on: the defaults);
#   2. gpu_step_bench again without cuDNN (GRADEX_CUDNN=off: im2col + cuBLAS) and without
#      caching (GRADEX_CUDA_CACHE=off), no PyTorch reference, so that what each buys is
#      measured in the same call.
# Everything lands in $OUT (./gpu-logs without it); the summary prints last.
# Usage (device tool): run(command="bash scripts/gpu-compute.sh", carry=[".gpu"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/.."
final="${OUT:-gpu-logs}"
mkdir -p "$final"
export OUT="$final"
GPU_CHECK_ONLY="${GPU_CHECK_ONLY:-tensor-cuda gpu_step_bench nn-cuda-models}" \
  GPU_CHECK_BUDGET="${GPU_CHECK_BUDGET:-330}" BENCH_ARGS="--breakdown --json $final/step.jsonl" \
  bash scripts/gpu-check.sh > "$final/gpu-check.txt" 2>&1
check_rc=$?
source scripts/gpu-env.sh
# cuDNN changes the convolutional models; caching changes every model's allocations.
for variant in "GRADEX_CUDNN=off resnet50,deepspeech" "GRADEX_CUDA_CACHE=off resnet50,lstm"; do
  read -r setting models <<< "$variant"
  echo "=== gpu_step_bench with $setting ===" >> "$final/variants.txt"
  env "$setting" timeout -k 5 55 .gpu/gpu_step_bench --no-reference --models "$models" \
    --repeats 3 --warmup 2 >> "$final/variants.txt" 2>&1
  echo "(rc $?)" >> "$final/variants.txt"
done
echo "=== variants (ours only) ==="
grep -v '^{' "$final/variants.txt"
echo "=== gpu-check.sh (rc $check_rc) ==="
tail -60 "$final/gpu-check.txt"
# Which convolution path ran (the first convolution of each gpu_step_bench says so).
grep -h "convolutions \(through\|run as\)" "$final"/variants.txt | sort -u
exit $check_rc
