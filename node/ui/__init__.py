"""The status page: its static files (``static/``, served as they are: no build step, nothing
from elsewhere) and the sessions its sign-in link opens. The routes: ``node.api.ui_routes``.
"""

from __future__ import annotations

from node.ui.sessions import READ_PATHS, UiSessions, cookie_name

__all__ = ["READ_PATHS", "UiSessions", "cookie_name"]
