"""What the end-to-end tests (tests/node, tests/net) and the benchmarks (scripts/bench) share:
real node processes and in-process nodes on loopback, clusters of them, hostile libp2p peers,
and the helpers that publish, read logs and metrics, and wait on conditions."""
