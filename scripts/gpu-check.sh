#!/usr/bin/env bash
# Runs the prebuilt GPU test executables in .gpu/ on a machine with a GPU and no Rust
# toolchain, with the CUDA libraries of its Python environment on LD_LIBRARY_PATH, and
# prints a summary table last. Logs go to $OUT (or ./gpu-logs).
#
# Build and carry (on the development machine):
#   cargo test -p tensor --test cuda --no-run        # prints the executable's path
#   mkdir -p .gpu && cp target/debug/deps/cuda-<hash> .gpu/tensor-cuda
# then run this script there (the device tool: carry [".gpu"]).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"
libs=""
for py in python3 python; do
  if command -v "$py" >/dev/null; then
    site=$("$py" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null) || continue
    for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
    break
  fi
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && libs="$libs:$d"; done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export REQUIRE_GPU=1 REQUIRE_NVRTC=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
summary=()
status=0
for exe in .gpu/*; do
  [ -x "$exe" ] || continue
  name=$(basename "$exe")
  start=$(date +%s%N)
  "$exe" --test-threads=1 > "$out/$name.log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  passed=$(grep -o '[0-9]* passed' "$out/$name.log" | tail -1)
  failed=$(grep -o '[0-9]* failed' "$out/$name.log" | tail -1)
  [ $rc -ne 0 ] && status=1
  summary+=("$(printf '%-28s rc=%-3s %-12s %-10s %8s ms' "$name" "$rc" "${passed:-?}" "${failed:-?}" "$ms")")
done
echo "GPU: $(cat "$out/gpu.txt")"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
printf '%s\n' "--- summary ---" "${summary[@]}"
exit $status
