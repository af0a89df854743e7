#!/usr/bin/env bash
# Installs the JDBC drivers Spark reads the node database through, from Debian's packages,
# only when their jars are missing (so it is a no-op, and needs no network, on a set-up machine).
set -euo pipefail
need=()
[ -e /usr/share/java/sqlite-jdbc.jar ] || need+=(libxerial-sqlite-jdbc-java)
[ -e /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing JDBC drivers: ${need[*]}"
bash "$(dirname "$0")/apt_install.sh" "${need[@]}"
for jar in sqlite-jdbc.jar postgresql.jar; do
  [ -e "/usr/share/java/$jar" ] || { echo "error: /usr/share/java/$jar still missing" >&2; exit 1; }
done
