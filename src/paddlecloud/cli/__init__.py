"""The ``paddlecloud`` command line (Click + Rich); it talks to the platform only through the SDK."""

import os

# The CLI is a short-lived process that loads no pydantic plugins; skipping their entry-point scan
# saves ~15 ms of every command's start-up (bench/list_jobs.py).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
