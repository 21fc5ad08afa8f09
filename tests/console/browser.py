"""The console tests' browser: the system's headless Chromium driven by Playwright.

:func:`chromium_path` finds the browser (``ACPGATE_CHROMIUM``, else ``chromium`` /
``chromium-browser`` / ``google-chrome`` on PATH); :func:`skip_reason` says why the
console tests cannot run here (no Playwright, no browser) — they are skipped with it.
:func:`open_browser` launches it; :class:`Shots` saves screenshots: every step's
when ``ACPGATE_CONSOLE_SCREENSHOTS`` names a folder (``docs/console`` regenerates the
pictures in docs/console.md), and the page as it was when a step failed, in a temporary folder
the failure names.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

#: Where the screenshots of a documented run go (unset: none, but on failure).
SCREENSHOTS_ENV = "ACPGATE_CONSOLE_SCREENSHOTS"
_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str | None:
    """The system Chromium's executable, or None."""
    explicit = os.environ.get("ACPGATE_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return next((p for p in map(shutil.which, _NAMES) if p), None)


def skip_reason() -> str | None:
    """Why no console test can run here (None: they can)."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return ("no Chromium found (apt-get install chromium, or set ACPGATE_CHROMIUM to its "
                "executable)")
    return None


@asynccontextmanager
async def open_browser() -> AsyncIterator[Any]:
    """A headless Chromium (Playwright ``Browser``), closed afterwards."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=chromium_path(), headless=True,
            # Containers run tests as root, where Chromium's sandbox cannot start.
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield browser
        finally:
            await browser.close()


class Shots:
    """Screenshots of one test's pages."""

    def __init__(self, test: str) -> None:
        self.test = test
        wanted = os.environ.get(SCREENSHOTS_ENV)
        self.folder = Path(wanted) if wanted else None
        self.pages: list[Any] = []

    async def step(self, page: Any, name: str, *, full: bool = False) -> None:
        """Save ``page`` as ``<name>.png`` when a documented run was asked for."""
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(self.folder / f"{name}.png"), full_page=full)

    async def failure(self) -> str:
        """Every open page saved to a fresh temporary folder; that folder."""
        folder = Path(tempfile.mkdtemp(prefix=f"acpgate-console-{self.test}-"))
        for i, page in enumerate(self.pages):
            try:
                await page.screenshot(path=str(folder / f"page{i}.png"), full_page=True)
                (folder / f"page{i}.html").write_text(await page.content(), encoding="utf-8")
            except Exception as exc:  # a crashed page: say so, keep the others
                (folder / f"page{i}.error.txt").write_text(repr(exc), encoding="utf-8")
        return str(folder)


@asynccontextmanager
async def failure_shots(test: str) -> AsyncIterator[Shots]:
    """``Shots`` for a test; a failure inside is re-raised naming its screenshots."""
    shots = Shots(test)
    try:
        yield shots
    except Exception as exc:  # not pytest's skip (a BaseException): that stays a skip
        if not shots.pages:
            raise
        folder = await shots.failure()
        print(f"\nconsole test {test} failed: screenshots of its pages in {folder}")
        raise AssertionError(f"{exc} (screenshots: {folder})") from exc
