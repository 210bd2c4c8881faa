#!/usr/bin/env bash
# Builds everything scripts/gpu-check.sh runs on a GPU machine that has no Rust toolchain,
# and puts it in .gpu/ (git-ignored; list it in .git/info/exclude), stripped of debug info
# to fit the device tool's 64 MiB carry limit (~30 MB in all):
#   .gpu/tensor-cuda       crates/tensor/tests/cuda.rs   (every op, GPU vs CPU)
#   .gpu/tensor-errors     crates/tensor/tests/errors.rs
#   .gpu/nn-cuda-models    crates/nn/tests/cuda_models.rs (ResNet-20, LSTM LM, DeepSpeech steps)
#   .gpu/comm-nccl         crates/comm/tests/nccl.rs (the NCCL backend on one GPU)
#   .gpu/comm-group        crates/comm/tests/group.rs (ProcessGroup's compositions on GPU tensors)
#   .gpu/tensor-sparsify   crates/tensor/tests/sparsify.rs (selection and DGC accumulation, GPU vs CPU)
#   .gpu/tensor-quantize   crates/tensor/tests/quantize.rs (QSGD's and TernGrad's draws, code packing, GPU vs CPU)
#   .gpu/compress-dgc-device  crates/compress/tests/dgc_device.rs (DGC on GPU tensors vs on slices)
#   .gpu/compress-exchange-tensor  crates/compress/tests/exchange_tensor.rs (exchange_tensor vs exchange)
#   .gpu/compress_bench    benchmarks: DGC compression on the GPU against torch.topk (--device cuda)
#   .gpu/gpu_step_bench    benchmarks: ResNet-50, the 2x1500 LSTM and DeepSpeech against PyTorch
#   .gpu/bin/train         the trainer (gpu-check.sh runs a short --device cuda job)
#   .gpu/bin/comm_bench    collectives, for scripts/device-netem.sh (not run by gpu-check.sh)
#   .gpu/bin/sparse_merge_bench  the sparse collectives' local merges, timed alone (on request)
#   .gpu/net/{ip,tc,lib/}  this machine's iproute2 and the libraries it needs beyond libc
#                          (the device image has none; netem.sh needs both)
#   .gpu/SOURCE            the commit and a hash of the sources it was built from
#   .gpu/bin/comm_bench-<commit>  with GPU_BUILD_BASELINE=<commit>: that commit's comm_bench,
#                          for A/B runs in one device call (NETEM_BENCH in device-netem.sh)
# Usage: bash scripts/gpu-build.sh   then   run(command="bash scripts/gpu-check.sh", carry=[".gpu"])
# CARGO_TARGET_DIR defaults to /work/target-cuda (a release build kept apart from the
# debug one the tests use).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-cuda}"
# The sources' hash before building: the stamp must name what was compiled, so a source
# edited during the build (minutes) is an error rather than a wrong stamp.
source_hash() { bash scripts/source-hash.sh; }
before=$(source_hash)
rm -rf .gpu && mkdir -p .gpu/bin
# The build's messages go to a file (stdout carries the JSON); shown when it fails.
errlog="$CARGO_TARGET_DIR/gpu-build.err"
mkdir -p "$CARGO_TARGET_DIR"
trap 'echo "gpu-build.sh failed; the end of $errlog:" >&2; tail -n 30 "$errlog" >&2' ERR
tests=$(cargo test --release -p tensor -p nn -p comm -p compress --no-run --message-format=json 2>"$errlog" |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])
')
pick() { awk -v t="$1" '$1 == t { print $2 }' <<<"$tests"; }
cp "$(pick cuda)" .gpu/tensor-cuda
cp "$(pick errors)" .gpu/tensor-errors
cp "$(pick cuda_models)" .gpu/nn-cuda-models
cp "$(pick nccl)" .gpu/comm-nccl
cp "$(pick group)" .gpu/comm-group
cp "$(pick sparsify)" .gpu/tensor-sparsify
cp "$(pick quantize)" .gpu/tensor-quantize
cp "$(pick dgc_device)" .gpu/compress-dgc-device
cp "$(pick exchange_tensor)" .gpu/compress-exchange-tensor
cargo build --release -p benchmarks --bin gpu_step_bench --bin compress_bench --bin comm_bench --bin sparse_merge_bench -p train --bin train
cp "$CARGO_TARGET_DIR/release/gpu_step_bench" .gpu/gpu_step_bench
cp "$CARGO_TARGET_DIR/release/compress_bench" .gpu/compress_bench
cp "$CARGO_TARGET_DIR/release/train" .gpu/bin/train
cp "$CARGO_TARGET_DIR/release/comm_bench" .gpu/bin/comm_bench
cp "$CARGO_TARGET_DIR/release/sparse_merge_bench" .gpu/bin/sparse_merge_bench
# ip and tc with their shared libraries, except glibc's own (the device's glibc is used;
# copying them would mix two). The binaries need a device glibc at least as new as this
# machine's. Optional: without iproute2 here, device-netem.sh needs it on the device.
if command -v ip >/dev/null && command -v tc >/dev/null; then
  mkdir -p .gpu/net/lib
  cp "$(command -v ip)" "$(command -v tc)" .gpu/net/
  if ldd .gpu/net/ip .gpu/net/tc | grep -q "not found"; then
    echo "gpu-build.sh: ip or tc has libraries ldd cannot find" >&2; exit 1
  fi
  ldd .gpu/net/ip .gpu/net/tc | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
    grep -v -E '/(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libnss_[a-z]+|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" .gpu/net/lib/; done
else
  echo "gpu-build.sh: no ip/tc here; .gpu/net not made (device-netem.sh then needs iproute2 on the device)" >&2
fi
# A baseline's comm_bench, built from a worktree of that commit in a target folder of its
# own: cargo hashes a workspace's crates by their path inside the workspace, so two
# checkouts sharing one folder take each other's artifacts for their own (a shared folder
# once linked this tree's comm_bench against the baseline's library).
if [ -n "${GPU_BUILD_BASELINE:-}" ]; then
  base=$(git rev-parse --short=7 "$GPU_BUILD_BASELINE^{commit}") ||
    { echo "gpu-build.sh: GPU_BUILD_BASELINE=$GPU_BUILD_BASELINE is not a commit here" >&2; exit 2; }
  tree=$(mktemp -d)/gradex-$base
  git worktree add --detach -q "$tree" "$base"
  # Removed also when the build fails (the ERR trap reports, then the script exits).
  trap 'git worktree remove --force "$tree" 2>/dev/null; rm -rf "$(dirname "$tree")"' EXIT
  (cd "$tree" && CARGO_TARGET_DIR="$CARGO_TARGET_DIR-baseline" \
    cargo build --release -p benchmarks --bin comm_bench 2>>"$errlog")
  cp "$CARGO_TARGET_DIR-baseline/release/comm_bench" ".gpu/bin/comm_bench-$base"
fi
strip --strip-debug .gpu/* .gpu/bin/* 2>/dev/null || true
# What the bundle was built from: gpu-check.sh recomputes the source hash on the device
# (scripts/source-hash.sh, shared by both) and fails on a stale bundle.
if [ "$(source_hash)" != "$before" ]; then
  echo "gpu-build.sh: sources changed during the build; run it again" >&2
  rm -f .gpu/SOURCE
  exit 1
fi
{
  echo "commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- crates benchmarks Cargo.toml Cargo.lock || echo '+changes')"
  echo "source $before"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ)"
} > .gpu/SOURCE
cat .gpu/SOURCE
du -sh .gpu/* .gpu/bin/*
du -sh .gpu
