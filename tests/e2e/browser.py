"""Debian's headless Chromium under Selenium, for the console's browser tests and bench/console.py.

``ensure_chromium()`` finds ``chromium`` and ``chromedriver`` (installing them as root with apt-get
through ``scripts/ensure-system-packages.sh chromium``, else skipping the calling test), and
``chromium_driver()`` starts one headless browser with its network and console logs recorded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

from .conftest import ROOT

__all__ = ["chromium_driver", "ensure_chromium"]


def _found() -> tuple[str, str] | None:
    found = shutil.which("chromium"), shutil.which("chromedriver")
    return (found[0], found[1]) if found[0] and found[1] else None


def ensure_chromium() -> tuple[str, str]:
    """(chromium, chromedriver); installed first where this runs as root with apt-get."""
    found = _found()
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["bash", str(ROOT / "scripts/ensure-system-packages.sh"), "chromium"], check=True)
        found = _found()
    if found is None:
        pytest.skip("no chromium / chromedriver: run scripts/ensure-system-packages.sh chromium as root")
    return found


def chromium_driver(binary: str, driver: str, width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium (as root: without its own sandbox) recording its network and console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding", "--disable-extensions", "--no-first-run"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(driver))
