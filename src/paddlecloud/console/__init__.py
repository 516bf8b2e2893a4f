"""The web console: server-rendered pages of the platform under ``/ui/`` (docs/console.md).

Being built (issue 13). ``static/vendor/`` holds the browser libraries it ships (htmx, its SSE
extension, uPlot), each with its licence (``static/vendor/README.md``).
"""
