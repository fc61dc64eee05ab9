"""The static evidence viewer: kept / dropped / gold sentences of real HotpotQA paragraphs, critic, answers."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from runfolders import bench, make_qa_run

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.report.__main__ import main as report_main
from canopy_lit.report.viewer import build_viewer


class Spans(HTMLParser):
    """Collects (item title, classes, text) for every sentence span inside item cards."""

    def __init__(self) -> None:
        super().__init__()
        self.title: str | None = None
        self.in_b = False
        self.cls: list[str] | None = None
        self.spans: list[tuple[str | None, list[str], str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "b" and self.title is None:
            self.in_b = True
        if tag == "div" and "ihead" in (a.get("class") or ""):
            self.title = None
        if tag == "span" and (a.get("title") or "").startswith("sentence "):
            self.cls = (a.get("class") or "").split()

    def handle_endtag(self, tag):
        if tag == "b":
            self.in_b = False

    def handle_data(self, data):
        if self.in_b and self.title is None:
            self.title = data
        elif self.cls is not None:
            self.spans.append((self.title, self.cls, data))
            self.cls = None


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return make_qa_run(tmp_path_factory.mktemp("run") / "canopy", "hotpotqa", 3, k=3, max_rounds=2)


def records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]


def test_viewer_shows_kept_dropped_and_gold_sentences_of_each_paragraph(run: Path, tmp_path: Path) -> None:
    index = build_viewer(run, tmp_path, limit=1)
    page = index.read_text()
    rec = records(run)[0]
    parser = Spans()
    parser.feed(page)
    b = bench("hotpotqa")
    q = next(q for q in b.questions if q.id == rec["id"])
    kept_items = [k for rd in rec["rounds"] for k in rd["kept"]]
    assert kept_items, "the first question kept nothing"
    h = Hierarchy(2)
    n_checked = 0
    for k in kept_items:
        item = b.items[k["item_id"]]
        leaves = h.builder(item.modality).leaves(item)
        shown = [(cls, text) for title, cls, text in parser.spans if title == item.title]
        assert [t for _, t in shown] == [leaf.text for leaf in leaves]  # every sentence, in order
        inside = {i for s, e in k["leaf_ranges"] for i in range(s, e)}
        for i, (cls, _) in enumerate(shown):
            assert ("kept" in cls) == (i in inside) and ("drop" in cls) == (i not in inside)
            assert ("gold" in cls) == (i in set(q.gold.get(item.id, [])))
        n_checked += len(shown)
    assert n_checked > 0
    assert any(k["leaf_ranges"] != [[0, k["n_leaves"]]] for k in kept_items), "refinement should drop something"
    # critic verdict and follow-up of round 1, answer vs gold
    ctrl = rec["rounds"][0]["controller"]
    assert "critic: insufficient: retrieve again" in page and ctrl["followup"] in page.replace("&#x27;", "'")
    assert "prediction:" in page and rec["answers"][0] in page
    assert "tree decisions (B=2)" in page


def test_page_is_self_contained_and_escapes_record_text(run: Path, tmp_path: Path) -> None:
    src = tmp_path / "run"
    src.mkdir()
    (src / ".hydra").mkdir()
    for f in ("config.yaml", "hydra.yaml"):
        (src / ".hydra" / f).write_text((run / ".hydra" / f).read_text())
    rec = records(run)[0]
    rec["prediction"] = "<script>alert(1)</script>"
    (src / "predictions.jsonl").write_text(json.dumps(rec) + "\n" + '{"id": "torn')  # torn last line
    page = build_viewer(src).read_text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # no CDN or remote asset
    assert page.count('<details class="q"') == 1


def test_missing_data_file_still_renders_ranges(run: Path, tmp_path: Path) -> None:
    index = build_viewer(run, tmp_path, data_path=str(tmp_path / "nope.json"), limit=1)
    page = index.read_text()
    assert "could not load hotpotqa" in page and "item text not available" in page
    assert "leaves [" in page  # the recorded leaf ranges are still shown


def test_cli_errors_and_output(run: Path, tmp_path: Path, capsys) -> None:
    assert report_main(["view", str(tmp_path)]) == 2
    assert "no predictions.jsonl" in capsys.readouterr().err
    assert report_main(["view", str(run), "--out", str(tmp_path / "v"), "--limit", "2"]) == 0
    assert (tmp_path / "v" / "index.html").read_text().count('<details class="q"') == 2
