#!/usr/bin/env bash
# The long soak (issue 41): every stateful method (dense, dgc, sbc, qsgd, local) of a
# 2-worker LeNet-5 job through SOAK_FAULTS process faults each (SIGKILL, SIGSTOP past the
# timeout, SIGTERM, a full disk where a tmpfs can be mounted) plus a damaged checkpoint
# after every second, each resumed; then every checkpoint tensor compared bit by bit with
# an uninterrupted run. Prints one row per method; the test fails on any differing bit.
# Usage: SOAK_FAULTS=12 bash scripts/soak.sh   (about 5 minutes on 2 cores; root for the
# disk-full faults). The CI-size run is `soak_at_ci_size`, part of `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
export SOAK_FAULTS="${SOAK_FAULTS:-12}"
echo "soak: $SOAK_FAULTS faults per method, $(nproc) cores, $(date -u +%Y-%m-%d)"
cargo test -p train --test soak -- --ignored soak_long --nocapture 2>&1 |
  grep -E '^(method|dense|dgc|sbc|qsgd|local) |skipped|ended before|came after|no worker|test result|panicked|differs'
