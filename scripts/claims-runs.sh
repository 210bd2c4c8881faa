#!/usr/bin/env bash
# The quick-preset runs issue 38 wants measured, one after another, each keeping the
# jobs it already finished (--reuse): gTop-k's convergence (about 35 min on 2 cores),
# paper 001's Table 1 with the paper's Adam (about 40 min), DGC Table 4's speech row
# (about an hour; needs `datasets prepare speech --out data/speech`), and the
# language-model gap against epochs at the long preset's full 10 epochs (about 65 min).
# Each writes its table, claim columns and curves under runs/<name>/, the printed table
# to runs/<name>.out and the workers' logs to runs/<name>.log.
# Usage: bash scripts/claims-runs.sh [gtopk_convergence] [localgrad_adam]
#   [dgc_table4_speech] [dgc_table4_long]   (default: all four)
# Do not rebuild target/release while it runs: each table starts its workers from its
# own binary.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  set -- gtopk_convergence localgrad_adam dgc_table4_speech dgc_table4_long
fi
command_of() {
  case "$1" in
    gtopk_convergence) echo "gtopk_convergence --preset quick" ;;
    localgrad_adam) echo "localgrad_table1 --preset quick --optimizer adam" ;;
    dgc_table4_speech) echo "dgc_table4 --preset speech" ;;
    dgc_table4_long) echo "dgc_table4 --preset long" ;;
    *) return 1 ;;
  esac
}
for name in "$@"; do
  command_of "$name" > /dev/null || {
    echo "claims-runs: unknown run '$name' (gtopk_convergence, localgrad_adam, dgc_table4_speech, dgc_table4_long)" >&2
    exit 2
  }
done
cargo build --release -p benchmarks
mkdir -p runs
for name in "$@"; do
  read -r -a args <<< "$(command_of "$name")"
  echo "== $name: ${args[*]} ($(date -u +%H:%M))"
  ./target/release/"${args[0]}" "${args[@]:1}" --reuse --out "runs/$name" \
    2> "runs/$name.log" | tee "runs/$name.out"
done
