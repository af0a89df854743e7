"""Cardinal Streams."""
