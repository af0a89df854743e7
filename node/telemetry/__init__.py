"""What a node tells its operator: structured logs and Prometheus metrics."""
