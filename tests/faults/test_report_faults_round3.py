"""Reports on hostile or damaged run records: the viewer's numbers and badges, escaping, one-line errors."""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from runfolders import make_probe_run, make_qa_run  # noqa: E402

from canopy_lit.eval.records import read_predictions  # noqa: E402
from canopy_lit.report.__main__ import main as report_main  # noqa: E402
from canopy_lit.report.archive import pack  # noqa: E402
from canopy_lit.report.viewer import build_viewer  # noqa: E402

PAYLOAD = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_qa_run(tmp_path_factory.mktemp("run") / "canopy", "hotpotqa", 2, k=3, max_rounds=2)


def first_record(run: Path) -> dict:
    return json.loads((run / "predictions.jsonl").read_text(encoding="utf-8").splitlines()[0])


def run_with(tmp_path: Path, run: Path, *lines: str) -> Path:
    """A copy of ``run``'s config with ``lines`` as its predictions.jsonl."""
    dst = tmp_path / "run"
    (dst / ".hydra").mkdir(parents=True)
    (dst / ".hydra" / "config.yaml").write_text((run / ".hydra" / "config.yaml").read_text())
    (dst / "predictions.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return dst


class Tags(HTMLParser):
    """Start tags as the browser's parser sees them, with the text of each summary badge."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.badges: list[tuple[str, str]] = []
        self._badge: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "span" and (a.get("class") or "").startswith("st "):
            self._badge = a["class"] or ""

    def handle_data(self, data: str) -> None:
        if self._badge is not None:
            self.badges.append((self._badge, data))
            self._badge = None


def parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


def test_viewer_shows_token_counts_as_counts_and_no_ok_badge_on_a_missed_answer(run: Path, tmp_path: Path) -> None:
    rec = first_record(run)
    # An evidence run's scores: a token count and answer recall 0 (the evidence lacks the answer).
    rec["scores"] = {"tokens": 293.0, "answer_recall": 0.0, "item_recall": 0.5}
    page = build_viewer(run_with(tmp_path, run, json.dumps(rec)), tmp_path / "v").read_text(encoding="utf-8")
    assert "TOKENS 293 " in page and "TOKENS 29300" not in page
    assert "ANSWER_RECALL 0" in page and "ITEM_RECALL 50" in page  # shares stay in %
    [(cls, text)] = parse(page).badges
    assert cls == "st bad" and text == "answer recall 0"
    assert 'data-hit="0"' in page  # the "wrong" filter finds it


def test_viewer_badge_follows_em_and_stays_neutral_when_nothing_is_scored(run: Path, tmp_path: Path) -> None:
    right, wrong, unscored = (first_record(run) for _ in range(3))
    right.update(id="a", scores={"em": 1.0, "f1": 1.0})
    wrong.update(id="b", scores={"em": 0.0, "f1": 0.4})
    unscored.update(id="c", scores={})
    page = build_viewer(run_with(tmp_path, run, *map(json.dumps, (right, wrong, unscored))), tmp_path / "v").read_text()
    assert parse(page).badges == [("st ok", "EM 100"), ("st bad", "EM 0"), ("st na", "ok")]


def test_viewer_escapes_every_record_field_it_shows(run: Path, tmp_path: Path) -> None:
    rec = first_record(run)
    assert rec["rounds"], "the fixture question has no round"
    rec["evidence_tokens"] = PAYLOAD
    rec["truncated_items"] = PAYLOAD
    for rd in rec["rounds"]:
        rd["duplicates"] = PAYLOAD
    page = build_viewer(run_with(tmp_path, run, json.dumps(rec)), tmp_path / "v").read_text(encoding="utf-8")
    scripts = [a for tag, a in parse(page).tags if tag == "script"]
    assert len(scripts) == 1  # the page's own filter code in <head>, nothing from the record
    assert PAYLOAD not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 2 + len(rec["rounds"])


def test_viewer_names_file_record_and_field_of_a_non_number(run: Path, tmp_path: Path, capsys) -> None:
    rec = first_record(run)
    rec["latency_s"] = "slow"
    folder = run_with(tmp_path, run, json.dumps(rec))
    assert report_main(["view", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {folder / 'predictions.jsonl'} (id {rec['id']!r}): latency_s: expected a number, got \"slow\""]


def test_a_predictions_line_that_is_not_an_object_is_one_error_naming_file_and_line(
    run: Path, tmp_path: Path, capsys
) -> None:
    rec = first_record(run)
    folder = run_with(tmp_path, run, json.dumps(rec), "[1, 2, 3]")
    preds = folder / "predictions.jsonl"
    with pytest.raises(ValueError, match=r"line 2: expected a JSON object \(one record per line\), got list"):
        read_predictions(preds)
    assert report_main(["view", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {preds}, line 2: expected a JSON object (one record per line), got list"]


@pytest.mark.parametrize("given", ["folder", "archive", "parent"])
def test_report_tables_names_a_corrupt_study_archive(tmp_path: Path, capsys, given: str) -> None:
    runs = tmp_path / "runs"
    make_probe_run(runs / "study" / "f0", n=2)
    archive = pack(runs / "study").archive
    for p in sorted((runs / "study").rglob("*"), reverse=True):  # the study as a fresh checkout has it: zip only
        p.unlink() if p.is_file() else p.rmdir()
    (runs / "study").rmdir()
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])  # a cut download / bad copy
    path = {"folder": runs / "study", "archive": archive, "parent": runs}[given]
    assert report_main(["tables", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {archive}: corrupt zip archive"), err
    assert not (tmp_path / "out").exists()


def test_report_tables_reads_a_study_archive_given_by_name(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    make_probe_run(runs / "study" / "f0", n=2)
    archive = pack(runs / "study").archive
    assert report_main(["tables", str(archive), "--out", str(tmp_path / "out")]) == 0
    [line] = capsys.readouterr().out.splitlines()
    table = Path(line.split(": ", 1)[1]).read_text(encoding="utf-8")
    assert "Generated from 1 run folder(s)" in table and "decision acc" in table
