"""``python -m node.cli``: the same as the ``syncnode`` command."""

from __future__ import annotations

from node.cli.main import main

raise SystemExit(main())
