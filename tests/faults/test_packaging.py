"""Issue "Reliability" 12: a package folder without ``__init__.py`` was left out of ``pip install .``.

The full check (build the wheel, install it into a temp folder, import every module from there) runs in
``.ci/run`` through ``scripts/check_wheel.py``; here: the fast layout check, and the checker itself on a
tiny hand-made install folder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "canopy_lit"


def test_every_package_folder_has_an_init() -> None:
    folders = {p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(str(d.relative_to(ROOT)) for d in folders if not (d / "__init__.py").is_file())
    assert missing == [], f"package folders without __init__.py (find_packages skips them): {missing}"


def test_pyproject_discovers_namespace_folders_too() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert find.get("namespaces") is True and "canopy_lit*" in find["include"]


def test_check_wheel_fails_on_a_folder_the_wheel_ships_without_init(tmp_path: Path) -> None:
    # hand-made "installed wheel": canopy_lit/ok.py imports, canopy_lit/sub/ has no __init__.py
    site = tmp_path / "site"
    (site / "canopy_lit" / "sub").mkdir(parents=True)
    (site / "canopy_lit" / "__init__.py").write_text("")
    (site / "canopy_lit" / "ok.py").write_text("X = 1\n")
    (site / "canopy_lit" / "sub" / "mod.py").write_text("Y = 2\n")
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_wheel.py"), str(site), "--source", str(site)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert "canopy_lit.sub is a namespace package" in run.stderr
    assert "1 failed" in run.stdout

    (site / "canopy_lit" / "sub" / "__init__.py").write_text("")
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_wheel.py"), str(site), "--source", str(site)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 imported, 0 skipped, 0 failed" in run.stdout
