#!/usr/bin/env bash
# Spark 4 needs Java 17 or newer; say so plainly instead of failing deep inside a Spark job.
set -euo pipefail
if ! command -v java >/dev/null 2>&1; then
  echo "error: java not found; install a Java 17+ runtime (e.g. apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
ver=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${ver%%.*}
[ "$major" = "1" ] && major=$(echo "$ver" | cut -d. -f2)
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
  echo "error: Java >= 17 required for Spark, found '${ver:-unknown}'" >&2
  exit 1
fi
