"""The node's configuration: every key declared with its default and check (``settings``,
the applications' sections in ``apps``), loaded from TOML, environment and flags (``load``)."""
