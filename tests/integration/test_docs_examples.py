"""The library guide's code runs as written: docs/how-to/library.md, its Python blocks in order in one
namespace from the repository root (real MiniLM, the committed adapter, real SmolLM2-135M via llama.cpp)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "how-to" / "library.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def guide_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of the guide, in page order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(GUIDE.read_text(encoding="utf-8"))]


def test_library_guide_runs_and_prints_what_it_shows(
    monkeypatch: pytest.MonkeyPatch, smollm2_path: Path
) -> None:
    blocks = guide_blocks()
    python = [code for lang, code in blocks if lang == "python"]
    assert len(python) == 4, f"{GUIDE}: expected 4 python blocks, found {len(python)}"
    monkeypatch.chdir(ROOT)  # the guide's adapter path is relative to the clone's root
    namespace: dict[str, object] = {"__name__": "library_guide"}
    printed = []
    for code in python:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(GUIDE), "exec"), namespace)  # noqa: S102  the guide is the test input
        printed.append(out.getvalue())
    # A text block right after an example is what that example prints (the one-call API, then the stages).
    shown = [code for (lang, code), (prev, _) in zip(blocks[1:], blocks) if lang == "text" and prev == "python"]
    assert len(shown) == 2 and printed[0] == shown[0] and printed[1] == shown[1]
    record = namespace["record"]
    assert record.rounds and record.rounds[0].retrieved == ["eiffel", "heights"]
    assert record.evidence_tokens > 0
    assert namespace["cache"].stats()["misses"] > 0
