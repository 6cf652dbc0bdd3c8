"""Render a report page in headless Chromium and save a PNG: proof that the page opens offline and
its figures draw. ``python -m reports.screenshot report.html -o shot.png`` (needs Debian's chromium)."""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def screenshot(page: Path, out: Path, width: int = 1200, height: int = 4000) -> Path:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise RuntimeError("no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                        f"--screenshot={out.resolve()}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("page")
    parser.add_argument("-o", "--output", default="report.png")
    args = parser.parse_args()
    print(screenshot(Path(args.page), Path(args.output)))
    sys.exit(0)
