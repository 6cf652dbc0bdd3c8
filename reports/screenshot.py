"""Render a report page in headless Chromium and save a PNG of the whole page: proof that it opens
offline and its figures draw. ``python -m reports.screenshot report.html -o shot.png`` (needs
Debian's chromium). Chromium shoots one window, so the window is made taller than any page and
the blank rows below the page's end are cropped away."""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from schema.exit_codes import ExitCode

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
MAX_HEIGHT = 16000


class ScreenshotError(RuntimeError):
    pass


def screenshot(page: Path, out: Path, width: int = 1200) -> Path:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise ScreenshotError("no chromium on PATH (apt-get install chromium)")
    if not page.is_file():
        raise ScreenshotError(f"{page} is not a file")
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{MAX_HEIGHT}",
                               f"--screenshot={out.resolve()}", page.resolve().as_uri()], capture_output=True, timeout=180)
    if proc.returncode or not out.exists():
        raise ScreenshotError(f"chromium failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace')[-200:]}")
    from PIL import Image, ImageChops  # matplotlib's own dependency
    with Image.open(out) as img:   # crop the blank rows below the page's end, keeping a 20 px margin
        rgb = img.convert("RGB")
        box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, (255, 255, 255))).getbbox()
        if box:
            rgb.crop((0, 0, rgb.width, min(rgb.height, box[3] + 20))).save(out)
    return out


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("page", help="report.html or history.html")
    parser.add_argument("-o", "--output", default="report.png", help="the PNG to write (default report.png)")
    parser.add_argument("--width", type=int, default=1200, help="window width in pixels (default 1200)")
    args = parser.parse_args(argv)
    try:
        print(screenshot(Path(args.page), Path(args.output), args.width))
    except (ScreenshotError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"screenshot: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
