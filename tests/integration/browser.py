"""Debian's Chromium for the browser tests, driven by Playwright (never a downloaded browser):
where it is (`SKULK_CHROMIUM`), the flags it runs with here, and `browser`, a fixture for a
headless context with a fresh profile (a test module imports it to use it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect, sync_playwright

CHROMIUM = os.environ.get("SKULK_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[BrowserContext]:
    """Headless Chromium with a fresh profile; closed (its processes gone) whatever happened."""
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing: `make setup` installs Debian's chromium"
    expect.set_options(timeout=30_000)
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 1100})
        try:
            yield context
        finally:
            context.close()
