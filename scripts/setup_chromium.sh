#!/usr/bin/env bash
# Installs Debian's chromium, the real browser the status page's test drives (through
# Playwright, which is told never to download a browser of its own), only when it is missing:
# a no-op, needing no network, on a set-up machine.
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
echo "installing chromium (for the status page's browser test)"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
[ -x /usr/bin/chromium ] || { echo "error: /usr/bin/chromium still missing" >&2; exit 1; }
