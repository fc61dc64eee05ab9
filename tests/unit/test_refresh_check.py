"""``python -m canopy_lit.studies.refresh --check``: every generated table, plot and block against its run folders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from runfolders import make_multirun

from canopy_lit.report.archive import pack
from canopy_lit.studies import refresh


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out like the repository: the docs with generated blocks and one study archive."""
    root = tmp_path_factory.mktemp("repo")
    (root / "experiments").mkdir()
    (root / "README.md").write_text("# x\n<!-- BEGIN table:paired -->\n<!-- END table:paired -->\n")
    (root / "experiments" / "README.md").write_text("# studies\n<!-- BEGIN table:main -->\nold\n<!-- END table:main -->\n")
    (root / "experiments" / "recipe.md").write_text("# recipe\n<!-- BEGIN table:recipe -->\n<!-- END table:recipe -->\n")
    jobs = [dict(method=m, name=b, refine=r, max_rounds=rounds, n=2)
            for b in ("hotpotqa", "tatqa") for m, r, rounds in (("vanilla", "keep_whole", 1), ("canopy", "parent_relative", 2))]  # fmt: skip
    make_multirun(root / "experiments" / "runs" / "ablation" / "main", jobs, study="main")
    pack(root / "experiments" / "runs" / "ablation")
    shutil.rmtree(root / "experiments" / "runs" / "ablation")  # only the archive is committed
    return root


def test_check_names_what_is_not_regenerated_then_passes(checkout: Path) -> None:
    problems, records = refresh.check(checkout)
    assert "experiments/tables/main.md: generated, but not committed" in problems
    assert "experiments/README.md: its generated blocks differ from what the run folders give" in problems
    assert any(r.startswith("experiments/tables/exclude_seen.md: not regenerated (a record") for r in records)
    written = refresh.regenerate(checkout)  # the archive is unpacked in place, the outputs written
    assert written["table:main"] == checkout / "experiments" / "tables" / "main.md"
    assert "| canopy |" in (checkout / "experiments" / "README.md").read_text()
    assert refresh.check(checkout)[0] == []


def test_check_fails_on_an_edited_number_and_an_orphan_output(checkout: Path) -> None:
    table = checkout / "experiments" / "tables" / "main.md"
    if not table.is_file():
        refresh.regenerate(checkout)
    text = table.read_text()
    orphan = checkout / "experiments" / "img" / "typed_by_hand.png"
    try:
        table.write_text(text.replace("| canopy |", "| canopy (tuned) |", 1))
        orphan.write_bytes(b"not generated")
        problems, _ = refresh.check(checkout)
        assert problems == [
            "experiments/tables/main.md: differs from what the run folders give",
            "experiments/img/typed_by_hand.png: committed, but no generator writes it",
        ]
    finally:
        table.write_text(text)
        orphan.unlink()


def test_pngs_compare_by_pixels(tmp_path: Path) -> None:
    def draw(path: Path, software: str, y: float = 1.0) -> Path:
        fig = Figure(figsize=(1, 1))
        fig.add_subplot().plot([0, 1], [0, y])
        fig.savefig(path, dpi=50, metadata={"Software": software})
        return path

    a = draw(tmp_path / "a.png", "matplotlib 3.8")
    b = draw(tmp_path / "b.png", "matplotlib 3.11")
    assert a.read_bytes() != b.read_bytes() and refresh.same_output(a, b)
    assert not refresh.same_output(a, draw(tmp_path / "c.png", "matplotlib 3.8", y=0.5))
