# Sourced by the device scripts (gpu-check.sh, gpu-session.sh): puts the CUDA libraries of
# the GPU machine's Python environment on LD_LIBRARY_PATH, since our binaries load them
# at run time (cudarc's dynamic loading) and the machine has no system CUDA toolkit path set.
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
# cudarc looks NCCL and cuDNN up as libnccl.so and libcudnn.so (or by the CUDA major
# version, 13); pip's wheels ship only libnccl.so.2 and libcudnn.so.9, so a temporary
# directory with unversioned links to them goes on the path too.
link_dir=$(mktemp -d)
for pair in libnccl.so.2:libnccl.so libcudnn.so.9:libcudnn.so; do
  have=${pair%%:*} want=${pair##*:}
  for d in ${libs//:/ }; do
    if [ -e "$d/$have" ] && [ ! -e "$d/$want" ]; then
      ln -sf "$d/$have" "$link_dir/$want"
      break
    fi
  done
done
libs="$libs:$link_dir"
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
