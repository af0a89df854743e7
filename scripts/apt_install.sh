#!/usr/bin/env bash
# apt_install.sh PACKAGE... : install Debian packages quietly (sudo when not root). Used by the
# set-up scripts (setup_jdbc.sh, setup_net.sh) once they found something missing.
set -euo pipefail
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
