#!/usr/bin/env bash
# `make demo`: three syncnode nodes on loopback find each other, publish, and replicate.
#
# Starts node1, then node2 and node3 bootstrapping from the nodes before them, publishes a few
# events on each node with `syncnode publish`, waits until every node's log holds every event
# (`syncnode log`), prints the logs, and stops the nodes with SIGTERM, checking their exit
# codes. Exits non-zero if a node fails to start, an event does not arrive within
# DEMO_TIMEOUT seconds (default 30), or a node does not stop cleanly. Everything lives in a
# temporary directory that is removed on exit, Ctrl-C included (KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."

SYNCNODE=${SYNCNODE:-.venv/bin/syncnode}
TIMEOUT=${DEMO_TIMEOUT:-30}
CHANNEL=general
NODES=(node1 node2 node3)
EVENTS_PER_NODE=3

work=$(mktemp -d "${TMPDIR:-/tmp}/syncnode-demo.XXXXXX")
declare -A pid api addr

say() { printf '\n== %s\n' "$*"; }
fail() { printf 'demo FAILED: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for name in "${!pid[@]}"; do
    kill -TERM "${pid[$name]}" 2>/dev/null || true
  done
  for name in "${!pid[@]}"; do
    wait "${pid[$name]}" 2>/dev/null || true
  done
  if [ "$status" -ne 0 ] && [ "$status" -ne 130 ]; then
    for name in "${NODES[@]}"; do
      [ -f "$work/$name.log" ] && { echo "-- last lines of $name's log:"; tail -n 5 "$work/$name.log"; }
    done
  fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'echo; echo "interrupted: stopping the nodes"; exit 130' INT TERM

start_node() {  # start_node NAME [--bootstrap MULTIADDR ...]
  local name=$1; shift
  "$SYNCNODE" run --data-dir "$work/$name" --api 127.0.0.1:0 \
    --listen /ip4/127.0.0.1/tcp/0 "$@" >"$work/$name.out" 2>"$work/$name.log" &
  pid[$name]=$!
  local deadline=$((SECONDS + 60))
  until grep -q '^api:' "$work/$name.out" 2>/dev/null; do
    kill -0 "${pid[$name]}" 2>/dev/null || fail "$name exited during start-up"
    [ $SECONDS -lt $deadline ] || fail "$name did not start within 60 s"
    sleep 0.2
  done
  api[$name]=$(awk '/^api:/ {print $NF; exit}' "$work/$name.out")
  addr[$name]=$(awk '/^listening:/ {print $NF; exit}' "$work/$name.out")
  printf '%s  pid %s  api %s\n        %s\n' "$name" "${pid[$name]}" "${api[$name]}" "${addr[$name]}"
}

connected_peers() {  # connected_peers NAME -> number of connected peers
  "$SYNCNODE" peers --json --api "${api[$1]}" --data-dir "$work/$1" \
    | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["connected"]))'
}

say "starting ${#NODES[@]} nodes in $work"
start_node node1
start_node node2 --bootstrap "${addr[node1]}"
start_node node3 --bootstrap "${addr[node1]}" --bootstrap "${addr[node2]}"

say "waiting for the nodes to find each other"
deadline=$((SECONDS + TIMEOUT))
for name in "${NODES[@]}"; do
  until [ "$(connected_peers "$name")" -ge $((${#NODES[@]} - 1)) ]; do
    [ $SECONDS -lt $deadline ] || fail "$name is not connected to every other node"
    sleep 0.5
  done
  echo "$name: $(connected_peers "$name") peers connected"
done
sleep 2  # one GossipSub heartbeat or two, so that the topic meshes are built

say "publishing $EVENTS_PER_NODE events on each node (channel $CHANNEL)"
ids=()
for name in "${NODES[@]}"; do
  for k in $(seq 1 $EVENTS_PER_NODE); do
    id=$("$SYNCNODE" publish "$CHANNEL" "hello $k from $name" --api "${api[$name]}" --data-dir "$work/$name")
    ids+=("$id")
    echo "$name published ${id:0:12}  \"hello $k from $name\""
  done
done

say "waiting up to $TIMEOUT s for all ${#ids[@]} events to arrive on every node"
deadline=$((SECONDS + TIMEOUT))
for name in "${NODES[@]}"; do
  while true; do
    log=$("$SYNCNODE" log "$CHANNEL" --json --api "${api[$name]}" --data-dir "$work/$name")
    missing=0
    for id in "${ids[@]}"; do
      grep -q "\"$id\"" <<<"$log" || missing=$((missing + 1))
    done
    [ $missing -eq 0 ] && break
    [ $SECONDS -lt $deadline ] || fail "$name is still missing $missing of ${#ids[@]} events"
    sleep 0.5
  done
  echo "$name has all ${#ids[@]} events"
done

for name in "${NODES[@]}"; do
  say "syncnode log $CHANNEL on $name (lamport, sender, message id, content)"
  "$SYNCNODE" log "$CHANNEL" --api "${api[$name]}" --data-dir "$work/$name"
done

say "stopping the nodes (SIGTERM)"
status=0
for name in "${NODES[@]}"; do
  kill -TERM "${pid[$name]}"
done
for name in "${NODES[@]}"; do
  code=0
  wait "${pid[$name]}" || code=$?
  unset "pid[$name]"
  echo "$name exited with code $code"
  [ $code -eq 0 ] || status=1
done
[ $status -eq 0 ] || fail "a node did not stop cleanly"
say "demo OK: every event reached every node"
