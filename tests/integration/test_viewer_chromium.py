"""The evidence viewer as a browser renders it: headless Chromium loads the page from disk."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from runfolders import make_qa_run  # noqa: E402

from canopy_lit.report.browser import headless, screenshot  # noqa: E402
from canopy_lit.report.viewer import build_viewer  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")),
        reason="needs Chromium (apt-get install chromium)",
    ),
]


def test_viewer_renders_in_headless_chromium(tmp_path: Path) -> None:
    run = make_qa_run(tmp_path / "run", "hotpotqa", 2, k=3, max_rounds=2)
    index = build_viewer(run, tmp_path / "viewer")
    dom = headless(index, "--dump-dom").stdout
    # The browser parsed the page into per-question sections with highlighted and faded sentences.
    assert dom.count('<details class="q"') == 2
    assert 'class="kept' in dom and 'class="drop' in dom and "critic: insufficient" in dom
    png = screenshot(index, tmp_path / "viewer.png", width=1000, height=900)
    img = np.asarray(Image.open(png).convert("RGB"), dtype=np.int32)
    assert img.shape[1] == 1000 and img.shape[0] > 300
    # kept sentences are drawn on the light-green highlight (#c8f7c5)
    green = (np.abs(img - np.array([200, 247, 197])).sum(axis=-1) < 12).mean()
    assert green > 0.005, f"no kept-region highlight in the screenshot ({green:.4f})"
