"""The documentation site (mkdocs.yml, docs/hooks/repo_pages.py): repository links resolve in the site, a broken
link or anchor fails the strict build, study pages join the nav, and the guides' code uses the real API.

The full site build (mkdocstrings over the package) is `-m slow` here; `.ci/run` runs it with `--strict`.
"""

from __future__ import annotations

import importlib
import re
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="needs the docs extra: pip install -e '.[docs]'")

from mkdocs.commands.build import build  # noqa: E402
from mkdocs.config import load_config  # noqa: E402
from mkdocs.exceptions import Abort  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "repo_pages.py"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def tiny_repo(root: Path, index_links: str = "") -> Path:
    """A repository laid out like this one: README, docs/, experiments/ with an image; returns mkdocs.yml."""
    write(
        root / "README.md",
        "# Tiny\n\nThe method: [method](docs/method.md#the-rule). Results: [here](experiments/).\n",
    )
    write(
        root / "docs" / "index.md",
        f"# Home\n\n[results](../experiments/study.md#numbers) [readme](../README.md)\n{index_links}",
    )
    write(root / "docs" / "method.md", "# Method\n\n## The rule\n\nKeep a child that beats its parent.\n")
    write(root / "experiments" / "README.md", "# Studies\n\n[study](study.md) [method](../docs/method.md)\n")
    write(
        root / "experiments" / "study.md",
        "# Study\n\n## Numbers\n\n![plot](img/plot.png)\n\n<details><summary>Per run</summary>\n\n| a | b |\n|---|---|\n"
        "| 1 | 2 |\n\n</details>\n",
    )
    write(root / "experiments" / "late.md", "# A study added later\n")
    (root / "experiments" / "img").mkdir()
    (root / "experiments" / "img" / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    config = root / "mkdocs.yml"
    write(
        config,
        f"""\
        site_name: tiny
        docs_dir: docs
        site_dir: site
        theme: {{name: mkdocs}}
        hooks: [{HOOK}]
        exclude_docs: hooks/
        markdown_extensions: [md_in_html, tables, toc]
        validation: {{omitted_files: warn, absolute_links: warn, unrecognized_links: warn, anchors: warn}}
        nav:
          - Home: index.md
          - Method: method.md
          - README: overview.md
          - Results:
              - experiments/README.md
              - experiments/study.md
        """,
    )
    return config


def build_site(config: Path) -> Path:
    cfg = load_config(str(config), strict=True)
    build(cfg)
    return Path(cfg.site_dir)


def test_repository_links_resolve_to_the_mounted_pages(tmp_path: Path) -> None:
    site = build_site(tiny_repo(tmp_path))
    index = (site / "index.html").read_text()
    assert 'href="experiments/study/#numbers"' in index and 'href="overview/"' in index
    readme = (site / "overview" / "index.html").read_text()
    assert 'href="../method/#the-rule"' in readme and 'href="../experiments/"' in readme
    study = (site / "experiments" / "study" / "index.html").read_text()
    assert (site / "experiments" / "img" / "plot.png").is_file() and 'src="../img/plot.png"' in study
    assert re.search(r"<details>\s*<summary>Per run</summary>\s*<table>", study), "markdown inside <details>"
    assert 'href="../method/"' in (site / "experiments" / "index.html").read_text()  # experiments/README.md


def test_a_study_page_missing_from_the_nav_joins_the_results_section(tmp_path: Path) -> None:
    site = build_site(tiny_repo(tmp_path))
    assert (site / "experiments" / "late" / "index.html").is_file()
    assert 'href="experiments/late/"' in (site / "index.html").read_text()  # in the nav of every page


@pytest.mark.parametrize(
    ("link", "complaint"),
    [("../experiments/missing.md", "not found among documentation files"),
     ("../README.md#no-such-heading", "the doc 'README.md' does not contain an anchor"),
     ("method.md#nope", "does not contain an anchor")],
)  # fmt: skip
def test_a_broken_link_or_anchor_fails_the_strict_build(
    tmp_path: Path, link: str, complaint: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = tiny_repo(tmp_path, index_links=f"\n[broken]({link})\n")
    with pytest.raises(Abort):
        build_site(config)
    # named as written in the repository: the file, the link, the target's repository path
    assert f"Doc file 'docs/index.md' contains a link '{link}'" in caplog.text and complaint in caplog.text


def test_the_new_modality_builder_example_uses_the_real_tree_api() -> None:
    """The guide's SlidesTreeBuilder, on a text item's sentences (the guide's Modality.SLIDES needs types.py)."""
    from canopy_lit.types import Item, Modality

    guide = (ROOT / "docs" / "how-to" / "new-modality.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if "class SlidesTreeBuilder" in b)
    namespace: dict[str, object] = {}
    exec(code.replace("Modality.SLIDES", "Modality.TEXT").replace("item.slides", "item.sentences"), namespace)  # noqa: S102
    builder = namespace["SlidesTreeBuilder"]()
    deck = Item("deck", Modality.TEXT, title="Deck", sentences=["Intro", "Method", "Results", "Outlook"])
    tree = builder.build(deck, branching=2)
    assert tree.n_leaves == 4 and len(tree) == 7
    assert builder.node_input(tree, 0).text.startswith("Deck\n[slide 1] Intro")
    assert builder.evidence_text(tree, [tree.find(1, 2)]) == "Deck\n…\n[slide 2] Method\n…"


@pytest.mark.slow
def test_the_site_builds_strict_with_every_page(tmp_path: Path) -> None:
    cfg = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True)
    build(cfg)
    site = tmp_path / "site"
    for page in (
        "index",
        "overview/index",
        "how-to/library/index",
        "api/loop/index",
        "experiments/results/index",
    ):
        assert (site / f"{page}.html").is_file(), page
    assert 'id="canopy_lit.pipeline.loop.EvidenceLoop"' in (site / "api" / "loop" / "index.html").read_text()
    # every public class and function of the reference's packages is rendered (an anchor of its own)
    import inspect

    from test_api_reference import PUBLIC_PACKAGES, defining_module

    ids = {i for f in (site / "api").rglob("index.html") for i in re.findall(r'id="([^"]+)"', f.read_text())}
    missing = []
    for package in PUBLIC_PACKAGES:
        mod = importlib.import_module(package)
        for name in mod.__all__:
            obj = getattr(mod, name)
            owners = [package, *defining_module(package, name, obj)]
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not {f"{o}.{name}" for o in owners} & ids:
                missing.append(f"{package}.{name}")
    assert not missing, missing
