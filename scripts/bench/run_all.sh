#!/usr/bin/env bash
# Runs every benchmark under scripts/bench/ (the full sizes; pass QUICK=1 for --quick runs).
# Each prints a table and, as its last line, a JSON object; results land in docs/bench/.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
flag=()
[ "${QUICK:-0}" = "1" ] && flag=(--quick)
status=0
for bench in scripts/bench/*_bench.py; do
  echo "== $bench"
  if ! "$py" "$bench" "${flag[@]}"; then
    echo "benchmark failed: $bench" >&2
    status=1
  fi
done
exit $status
