"""Headless Chromium for the evidence viewer: render a page from disk, take a screenshot.

No server and no network services: a fresh profile per call, GPU off. Chromium is optional
(``apt-get install chromium``); only ``--screenshot`` and the slow viewer test need it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def headless(page: str | Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium on a page from disk (fresh profile, no network services, no GPU).

    Raises:
        FileNotFoundError: no Chromium on PATH (Debian: ``apt-get install chromium``).
    """
    exe = next((p for p in map(shutil.which, BROWSERS) if p), None)
    if exe is None:
        raise FileNotFoundError("headless rendering needs Chromium on PATH (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
            "--hide-scrollbars", *args, Path(page).resolve().as_uri(),
        ]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def screenshot(page: str | Path, png: str | Path, width: int = 1200, height: int = 1400) -> Path:
    """A PNG of the page as Chromium renders it (what the README shows)."""
    png = Path(png).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    proc = headless(page, f"--window-size={width},{height}", f"--screenshot={png}")
    if not png.is_file():
        raise RuntimeError(f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}")
    from PIL import Image, ImageChops

    with Image.open(png) as im:  # cut the empty page below the content
        rgb = im.convert("RGB")
        box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, (255, 255, 255))).getbbox()
        if box and box[3] + 16 < rgb.height:
            rgb.crop((0, 0, rgb.width, box[3] + 16)).save(png)
    return png
