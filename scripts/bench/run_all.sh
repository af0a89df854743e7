#!/usr/bin/env bash
# Runs every benchmark under scripts/bench/ (the full sizes; QUICK=1 for the --quick sizes).
# Each prints a table and, as its last line, a JSON object; results land in docs/bench/.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
quick=()
[ "${QUICK:-0}" = "1" ] && quick=(--quick)
status=0
for bench in scripts/bench/*_bench.py; do
  args=("${quick[@]}")
  if [ "$(basename "$bench")" = recon_bench.py ]; then
    # Recon's sizes are explicit: the whole N x D grid, or one mid-size point when quick.
    if [ "${QUICK:-0}" = "1" ]; then args=(--n 100000 --d 1000 --no-save); else args=(--grid); fi
  fi
  echo "== $bench ${args[*]}"
  if ! "$py" "$bench" "${args[@]}"; then
    echo "benchmark failed: $bench" >&2
    status=1
  fi
done
exit $status
