"""``encoder_fingerprint.json`` has one reader, ``canopy_lit.encoders.fingerprint``, importable without torch
(run records and reports read it), which the encoders and ``run.json`` both use."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from canopy_lit.eval.records import adapter_axes

ROOT = Path(__file__).resolve().parents[2]


def test_one_module_names_the_fingerprint_file() -> None:
    named = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "canopy_lit").rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value == "encoder_fingerprint.json"
    )
    assert named == ["canopy_lit/encoders/fingerprint.py"]


def test_the_fingerprint_reader_and_run_records_import_no_torch() -> None:
    code = ("import sys, canopy_lit.encoders.fingerprint, canopy_lit.eval.records; "
            "assert 'torch' not in sys.modules, 'torch imported'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


@pytest.mark.parametrize(("text", "problem"), [("{not json", "not valid JSON"), ("[1, 2]", "expected a JSON object, got list")])
def test_a_broken_fingerprint_is_named_by_run_records(tmp_path: Path, text: str, problem: str) -> None:
    adapter = tmp_path / "outputs" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "encoder_fingerprint.json").write_text(text)
    with pytest.raises(ValueError, match=f"encoder_fingerprint.json: {problem}"):
        adapter_axes({"encoder": {"adapter": str(adapter)}})


def test_run_records_take_the_recorded_adapter_hash_without_weights(tmp_path: Path) -> None:
    adapter = tmp_path / "outputs" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "encoder_fingerprint.json").write_text(json.dumps({"adapter_hash": "0123456789abcdef"}))
    assert adapter_axes({"encoder": {"adapter": str(adapter)}}) == ("outputs/adapter", "0123456789abcdef")
