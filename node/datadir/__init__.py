"""What a node keeps in its data dir beside the database: the one-process lock, the API's address
and token files, and the disk usage reported by status."""
