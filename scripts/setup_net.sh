#!/usr/bin/env bash
# Installs what the emulated-internet tests (tests/net/) need: nftables for the home routers'
# masquerade, iproute2 for namespaces, veth, bridges and tc. A no-op when both are present.
set -euo pipefail
need=()
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || need+=(iproute2)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing network test tools: ${need[*]}"
bash "$(dirname "$0")/apt_install.sh" "${need[@]}"
for tool in nft ip tc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool still missing" >&2; exit 1; }
done
