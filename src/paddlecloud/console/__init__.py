"""The web console: server-rendered pages of the platform under ``/ui/`` (docs/console.md).

Jinja templates (``templates/``), htmx for the parts that update in place, uPlot for charts; the
browser libraries are shipped in ``static/vendor/`` with their licences (no build step, no other
host). The API server mounts :func:`create_console` at ``/ui``; the pages call the same controller
view functions as the REST routes, with the caller's identity.
"""

from __future__ import annotations

from paddlecloud.console.app import create_console

__all__ = ["create_console"]
