"""What a node keeps in its data dir beside the database: the one-process lock, the API's address
and token files, and the disk usage reported by status; and the identity key's file name (the
key itself: ``node.p2p.identity``), which commands that must not import libp2p look for."""

KEY_FILE = "identity.key"
