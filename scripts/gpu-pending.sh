#!/usr/bin/env bash
# Every GPU check still pending, in one device call of at most about 8 minutes, most
# important first, so that a session lent a GPU for 15 minutes runs it once and has time
# to run it again. From the prebuilt bundle in .gpu/ (scripts/gpu-build.sh; drop .gpu/net
# and the comm benchmarks if it exceeds the 64 MiB carry):
#   1. tensor-cuda: every op on the GPU against the CPU (convolutions through cuDNN, the
#      kernels' fault reports, the launch! macro's launches, a training step without host
#      waits) (issue 37);
#   2. comm-nccl: the collectives on NCCL and its watchdog ending a stalled set-up within
#      the timeout (issue 36);
#   3. the methods on GPU tensors against their host code, the compositions, the
#      quantization and selection kernels (issue 36);
#   4. nn-cuda-models, and gpu_step_bench against PyTorch with the dense and DGC exchanges
#      (issues 36 and 37);
#   5. the trainer's one exchange path on a GPU: DGC, gTop-k, SBC and QSGD with one worker
#      over TCP (the methods' host code) and over NCCL (their tensor code): the same final
#      loss; and 2-process jobs over TCP on the one GPU (identical parameters on both
#      ranks), bf16 dense and DGC with buckets among them.
# What the budget cuts is listed as skipped; GPU_CHECK_ONLY and GPU_CHECK_BUDGET override.
# Everything lands in $OUT (./gpu-logs without it); the summary prints last.
# Usage (device tool): run(command="bash scripts/gpu-pending.sh", carry=[".gpu"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/.."
final="${OUT:-gpu-logs}"
mkdir -p "$final"
export OUT="$final"
runs="tensor-cuda comm-nccl compress-exchange-tensor comm-group tensor-quantize tensor-sparsify \
compress-dgc-device nn-cuda-models gpu_step_bench \
train-resnet20-dgc-tcp train-resnet20-dgc-nccl train-resnet20-gtopk-tcp train-resnet20-gtopk-nccl \
train-resnet20-sbc-tcp train-resnet20-sbc-nccl train-resnet20-qsgd-tcp train-resnet20-qsgd-nccl \
train2-resnet20-dense-bf16 train2-resnet20-dgc train2-resnet20-dgc-buckets train2-resnet20-gtopk \
train2-resnet20-topk train2-resnet20-sbc train2-resnet20-local train2-resnet20-qsgd"
GPU_CHECK_ONLY="${GPU_CHECK_ONLY:-$runs}" GPU_CHECK_BUDGET="${GPU_CHECK_BUDGET:-450}" \
  BENCH_ARGS="${BENCH_ARGS:---breakdown --exchange dense,dgc --json $final/step.jsonl}" \
  bash scripts/gpu-check.sh > "$final/gpu-check.txt" 2>&1
check_rc=$?
echo "=== gpu-check.sh (rc $check_rc) ==="
tail -70 "$final/gpu-check.txt"
exit $check_rc
