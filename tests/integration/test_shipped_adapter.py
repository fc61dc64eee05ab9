"""The trained adapter ships inside the package: ``compress(..., adapter="quickstart")`` works from any folder,
and the README's library snippet runs as written outside the checkout (real MiniLM, the shipped weights)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from canopy_lit.adapters import SHIPPED, resolve_adapter, shipped_adapter

ROOT = Path(__file__).resolve().parents[2]
RECIPE_ADAPTER = ROOT / "experiments" / "runs" / "recipe" / "base" / "adapter"
FILES = ("adapter_model.safetensors", "adapter_config.json", "encoder_fingerprint.json")


def readme_snippet() -> str:
    """The README's library block (the python block that imports ``compress``)."""
    blocks = re.findall(r"^```python\n(.*?)^```$", (ROOT / "README.md").read_text(encoding="utf-8"), re.S | re.M)
    found = [b for b in blocks if "from canopy_lit import compress" in b]
    assert len(found) == 1, "README.md: expected one python block importing compress"
    return found[0]


def test_the_shipped_quickstart_adapter_is_the_committed_recipe_adapter() -> None:
    folder = shipped_adapter("quickstart")
    for name in FILES:  # the README's frontier and probe numbers were measured with these bytes
        assert (folder / name).read_bytes() == (RECIPE_ADAPTER / name).read_bytes(), name


def test_a_name_resolves_to_the_package_folder_and_a_local_folder_of_that_name_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_adapter("quickstart") == shipped_adapter("quickstart")
    assert resolve_adapter("quickstart").is_relative_to(Path(sys.modules["canopy_lit.adapters"].__file__).parent)
    assert resolve_adapter("elsewhere/adapter") == "elsewhere/adapter" and resolve_adapter(None) is None
    (tmp_path / "quickstart").mkdir()
    assert resolve_adapter("quickstart") == "quickstart"  # the user's own folder is never shadowed
    with pytest.raises(ValueError, match="no shipped adapter 'nope'; shipped: quickstart"):
        shipped_adapter("nope")


def test_changed_shipped_weights_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import canopy_lit.adapters as adapters

    copy = tmp_path / "quickstart"
    shutil.copytree(shipped_adapter("quickstart"), copy)
    data = bytearray((copy / FILES[0]).read_bytes())
    data[-1] ^= 1
    (copy / FILES[0]).write_bytes(bytes(data))
    monkeypatch.setattr(adapters, "_FOLDER", tmp_path)
    with pytest.raises(ValueError, match=r"has sha256 \w{12}, pinned " + SHIPPED["quickstart"][:12]):
        adapters.shipped_adapter("quickstart")


def test_the_readme_snippet_runs_outside_the_checkout_with_the_shipped_adapter(tmp_path: Path) -> None:
    code = readme_snippet()
    assert 'adapter="quickstart"' in code
    run = subprocess.run([sys.executable, "-c", code + "\nprint('REGIONS', len(evidence.regions))\n"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    # the same call with the committed folder gives the same evidence: the name is only a way to find it
    from canopy_lit import compress

    namespace: dict[str, object] = {}
    exec(code.split("evidence = compress(")[0], namespace)  # noqa: S102  question and items of the snippet
    expected = compress(namespace["question"], namespace["retrieved_items"], adapter=str(RECIPE_ADAPTER), budget=300)
    assert run.stdout == expected.text + "\n" + f"REGIONS {len(expected.regions)}\n"
    assert len(expected.regions) > 0 and "GmbH" in expected.text


def test_a_config_names_the_shipped_adapter_like_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``encoder.adapter=quickstart`` (TextEncoder is the encoder group's _target_) loads the shipped weights."""
    from canopy_lit.encoders.text import TextEncoder

    monkeypatch.chdir(tmp_path)
    by_name, by_folder = TextEncoder("minilm", adapter="quickstart"), TextEncoder("minilm", adapter=str(RECIPE_ADAPTER))
    assert by_name.has_adapter and by_name.fingerprint == by_folder.fingerprint
