#!/usr/bin/env bash
# Prints a short hash of the sources a GPU bundle is built from (every .rs and .cu under
# crates/ and benchmarks/, and the manifests and lock file that pick the dependencies,
# features and release profile, in a fixed order). gpu-build.sh stamps .gpu/SOURCE with
# it and gpu-check.sh compares it on the device, where the working tree travels but git
# does not.
set -euo pipefail
cd "$(dirname "$0")/.."
{ find crates benchmarks -type f \( -name '*.rs' -o -name '*.cu' -o -name Cargo.toml \)
  ls Cargo.toml Cargo.lock; } | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
