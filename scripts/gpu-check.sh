#!/usr/bin/env bash
# Runs the prebuilt GPU test executables (and any benchmark binary) carried in .gpu/ on a
# machine with a GPU and no Rust toolchain, and prints a summary table last.
#
# On the development machine (see crates/tensor/CUDA.md):
#   CARGO_TARGET_DIR=/work/target-cuda cargo test --release -p tensor --no-run   # prints the executables
#   mkdir -p .gpu && cp <each printed tests/*.rs executable> .gpu/<name>
# then, on the GPU machine: bash scripts/gpu-check.sh   (the device tool: carry [".gpu"]).
#
# Executables named *bench* run without test-harness flags; all others are libtest
# binaries and run with --test-threads=1 --nocapture (the GPU-vs-CPU errors are printed).
# Logs go to $OUT (or ./gpu-logs). Exit status: 0 when every executable passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"

# Every site-packages/nvidia/*/lib folder (NVRTC, cuBLAS, ... from pip) and the CUDA
# toolkit's lib64 when one is installed; the driver (libcuda) comes from the system.
libs=""
for py in python3 python; do
  command -v "$py" >/dev/null || continue
  roots=$("$py" -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null) || continue
  for root in $roots; do
    for d in "$root"/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
  done
  break
done
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libs="$libs:$d"
done
# cudarc looks NCCL up as libnccl.so; pip's nvidia-nccl wheels ship only libnccl.so.2, so
# a temporary directory with a libnccl.so link to it goes on the path too.
nccl_dir=$(mktemp -d)
for d in ${libs//:/ }; do
  if [ -e "$d/libnccl.so.2" ] && [ ! -e "$d/libnccl.so" ]; then
    ln -sf "$d/libnccl.so.2" "$nccl_dir/libnccl.so"
    libs="$libs:$nccl_dir"
    break
  fi
done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export REQUIRE_GPU=1 REQUIRE_NVRTC=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || echo "nvidia-smi unavailable" > "$out/gpu.txt"

summary=()
status=0
shopt -s nullglob
exes=(.gpu/*)
if [ ${#exes[@]} -eq 0 ]; then
  echo "no executables in .gpu/ (see the header of this script)" >&2
  exit 2
fi
for exe in "${exes[@]}"; do
  [ -f "$exe" ] && [ -x "$exe" ] || continue
  name=$(basename "$exe")
  start=$(date +%s%N)
  case "$name" in
    # BENCH_ARGS (e.g. --breakdown) goes to every benchmark binary.
    *bench*) "$exe" ${BENCH_ARGS:-} > "$out/$name.log" 2>&1 ;;
    *) "$exe" --test-threads=1 --nocapture > "$out/$name.log" 2>&1 ;;
  esac
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  passed=$(grep -o '[0-9]* passed' "$out/$name.log" | tail -1)
  failed=$(grep -o '[0-9]* failed' "$out/$name.log" | tail -1)
  [ $rc -ne 0 ] && status=1
  summary+=("$(printf '%-26s rc=%-3s %-11s %-9s %8s ms' "$name" "$rc" "${passed:--}" "${failed:--}" "$ms")")
done

# The trainer on the GPU, when its binary is carried as .gpu/bin/train: two workers share
# GPU 0 (each its own context) and train ResNet-20 on synthetic images with DGC.
if [ -x .gpu/bin/train ]; then
  name=train-resnet20-dgc-cuda
  start=$(date +%s%N)
  .gpu/bin/train --workers 2 --model resnet20 --dataset synthetic --device cuda \
    --method dgc --method-opt warmup_epochs=0 --batch-size 64 --steps 60 \
    --out "$out/$name" > "$out/$name.log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  [ $rc -ne 0 ] && status=1
  summary+=("$(printf '%-26s rc=%-3s %-21s %8s ms' "$name" "$rc" "60 steps" "$ms")")

  # --backend nccl (dense, gradients averaged on the GPU) against --backend tcp (copied to
  # the host) on one GPU: world size 1, the only one a one-GPU machine allows, so both
  # averages are the identity and the two runs must end with the same loss.
  for be in tcp nccl; do
    name=train-resnet20-dense-$be
    start=$(date +%s%N)
    .gpu/bin/train --workers 1 --model resnet20 --dataset synthetic --device cuda \
      --backend "$be" --method dense --batch-size 64 --steps 20 --log-every 5 \
      --out "$out/$name" > "$out/$name.log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    [ $rc -ne 0 ] && status=1
    loss=$(grep -o '"final_loss": *[-0-9.e]*' "$out/$name/summary.json" 2>/dev/null | grep -o '[-0-9.e]*$')
    summary+=("$(printf '%-26s rc=%-3s %-21s %8s ms' "$name" "$rc" "loss ${loss:--}" "$ms")")
    eval "loss_$be=\${loss:-none}"
  done
  if [ "$loss_tcp" != "$loss_nccl" ] || [ "$loss_tcp" = none ]; then
    status=1
    summary+=("nccl vs tcp final loss differ: $loss_nccl vs $loss_tcp")
  fi
fi

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
  tail -n 6 "$log" | grep -v "^{"
done
echo "GPU: $(cat "$out/gpu.txt")"
printf '%s\n' "--- summary ---" "${summary[@]}"
exit $status
