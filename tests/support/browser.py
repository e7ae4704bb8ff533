"""The headless browser for dashboard tests: Debian's ``/usr/bin/chromium`` driven by Playwright.

``require_chromium()`` skips a test when the browser or Playwright is missing, saying exactly how
to enable it, except under CI (the environment variable ``CI`` is set), where it fails loudly:
CI must never pass by skipping. ``.ci/run`` installs the browser when it is absent.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

#: Debian's package; the tests never download a browser of their own (``playwright install``).
CHROMIUM = os.environ.get("TEST_CHROMIUM", "/usr/bin/chromium")


def missing_reason() -> str | None:
    """None when the browser and Playwright are usable, else what is missing and the fix."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is not installed; enable this test with 'apt-get install chromium'"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed; enable this test with \"pip install -e '.[dev]'\""
    return None


def require_chromium() -> None:
    """Skip (fail under CI) unless the headless browser can be launched."""
    reason = missing_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
