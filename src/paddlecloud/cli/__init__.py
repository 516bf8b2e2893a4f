"""The ``paddlecloud`` command line (Click + Rich); it talks to the platform only through the SDK."""

import os
import sys

# The CLI is a short-lived process that loads no pydantic plugins; skipping their entry-point scan
# saves ~15 ms of every command's start-up (bench/list_jobs.py).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

# httpx's package __init__ imports httpx's own command-line tool (``httpx._main``: click, Rich's
# console, progress, syntax and table modules, pygments' lexers; ~0.1 s of every command here) inside
# ``try: ... except ImportError``, for installs without its ``cli`` extra. This CLI never runs httpx's
# tool; a ``None`` entry in ``sys.modules`` makes that import raise ImportError (the import system's
# documented rule), so httpx takes its no-CLI path: the SDK's HTTP is untouched, only ``httpx.main``
# in this process says the extra is missing. Not when httpx is in already (a test or an embedding
# program that imported it first keeps its ``httpx.main``).
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def run() -> None:
    """The ``paddlecloud`` program: ``main()``, with a Ctrl-C held from before its imports
    (``interrupt.py``: click's and the API's, ~45 ms of every start-up here)."""
    from paddlecloud.cli import interrupt

    interrupt.hold()
    from paddlecloud.cli.main import main

    main()
