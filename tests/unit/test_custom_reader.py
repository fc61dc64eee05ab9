"""Custom data without code (``readers/custom.py``), the public span-to-leaf helper and
readers named by a dotted path.

Questions come from the bundled HotpotQA dev file converted to the custom format (its supporting sentences
become ``gold_spans``), so the custom reader must reproduce the official reader's gold leaves; the table,
image and video items use the bundled media. Records written by hand are named so.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from canopy_lit.data import (
    BENCHMARKS,
    Benchmark,
    DataFormatError,
    gold_leaves,
    load_benchmark,
    load_split,
    register_benchmark,
    split_questions,
)
from canopy_lit.types import Item, Modality, Question

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
HOTPOT_DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_100.json"
IMAGE = DATA / "media" / "images" / "coffee.png"
VIDEO = DATA / "media" / "video" / "vtest.avi"


def custom_records(n: int, offsets: bool = False) -> list[dict]:
    """The first ``n`` bundled HotpotQA dev questions in the custom format: one item per context paragraph
    (its sentences kept), the supporting sentences as gold spans (or as character offsets)."""
    out = []
    for rec in json.loads(HOTPOT_DEV.read_text())[:n]:
        support: dict[str, list[int]] = {}
        for title, sent in rec["supporting_facts"]:
            support.setdefault(title, []).append(sent)
        items = []
        for title, sentences in rec["context"]:
            sentences = [s.strip() for s in sentences]
            item: dict = {"id": title, "title": title, "sentences": sentences}
            gold = [i for i in support.get(title, []) if i < len(sentences)]
            if gold and offsets:
                starts = [sum(len(s) + 1 for s in sentences[:i]) for i in range(len(sentences))]
                item["gold_offsets"] = [[starts[i], starts[i] + len(sentences[i])] for i in gold]
            elif gold:
                item["gold_spans"] = [sentences[i] for i in gold]
            items.append(item)
        out.append({"id": rec["_id"], "question": rec["question"], "answers": [rec["answer"]], "items": items})
    return out


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def local_gold(q: Question) -> dict[str, list[int]]:
    return {k.split(":", 1)[1]: v for k, v in q.gold.items()}


@pytest.fixture(scope="module")
def official() -> Benchmark:
    return load_benchmark("hotpotqa", HOTPOT_DEV)


@pytest.mark.parametrize("offsets", [False, True], ids=["text spans", "character offsets"])
def test_hotpotqa_converted_to_custom_jsonl_has_the_official_gold(tmp_path, official, offsets) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", custom_records(20, offsets))
    bench = load_benchmark("custom", path)
    assert [q.id for q in bench.questions] == [q.id for q in official.questions[:20]]
    for mine, ref in zip(bench.questions, official.questions, strict=False):
        assert mine.text == ref.text and mine.answers == ref.answers and mine.benchmark == "custom"
        # a leaf list per gold paragraph, equal to the official reader's supporting sentences
        assert local_gold(mine) == {k.split(":", 1)[1]: v for k, v in ref.gold.items() if v}
        assert [c.split(":", 1)[1] for c in bench.candidates[mine.id]] == [
            c.split(":", 1)[1] for c in official.candidates[ref.id]
        ]
    assert sum(len(v) for q in bench.questions for v in q.gold.values()) >= 40


def test_every_modality_and_gold_kind(tmp_path) -> None:
    # Hand-written record over the bundled media.
    rec = {
        "id": "hand-1",
        "question": "Where is the coffee?",
        "answer": "on the table",
        "choices": ["on the table", "in the cup"],
        "meta": {"source": "hand"},
        "items": [
            {"id": "p", "title": "Kitchen", "text": "The room is bright. The coffee is on the table.",
             "gold_spans": ["on the table"]},
            {"id": "t", "title": "Inventory", "table": {"header": ["thing", "place"],
             "rows": [["cup", "shelf"], ["coffee", "table"], [3, None]]}, "gold_spans": ["coffee"]},
            {"id": "r", "table": {"rows": [["a"], ["b"], ["c"]]}, "gold_leaves": [0, 2]},
            {"id": "i", "title": "Coffee", "image": str(IMAGE), "caption": "a cup of coffee", "gold": True},
            {"id": "v", "video": {"path": "media/video/vtest.avi", "start": 0, "end": 79.5},
             "gold_times": [[52, 58]]},
            {"id": "w", "title": "Elsewhere", "text": "Nothing here.", "gold": True},
            {"id": "x", "title": "Distractor", "text": "Tea is green."},
        ],
    }  # fmt: skip
    bench = load_benchmark("custom", write_jsonl(tmp_path / "hand.jsonl", [rec]), media_root=DATA)
    q = bench.questions[0]
    assert q.choices == ["on the table", "in the cup"] and q.meta["source"] == "hand"
    assert local_gold(q) == {"p": [1], "t": [1], "r": [0, 2], "i": [0], "v": [1], "w": []}
    items = {k.split(":", 1)[1]: v for k, v in bench.items.items()}
    assert [items[k].modality for k in "ptrivwx"] == [Modality.TEXT, Modality.TABLE, Modality.TABLE,
                                                     Modality.IMAGE, Modality.VIDEO, Modality.TEXT, Modality.TEXT]  # fmt: skip
    assert items["t"].table.rows[2] == ["3", ""] and items["i"].meta["caption"] == "a cup of coffee"
    assert items["v"].video.path == str(VIDEO) and items["v"].video.end == 79.5
    assert bench.candidates[q.id] == [f"custom:{k}" for k in "ptrivwx"]


def test_items_are_shared_by_id_and_by_content(tmp_path) -> None:
    # Hand-written: the second record reuses p by id (now gold) and repeats x verbatim without an id.
    recs = [
        {"question": "a?", "answers": "A", "items": [{"id": "p", "text": "Alpha. Beta."}, {"text": "Gamma."}]},
        {"question": "b?", "answers": ["B"], "items": [{"id": "p", "gold_spans": ["Beta"]}, {"text": "Gamma."}]},
        {"question": "c?", "items": ["p"]},
    ]
    bench = load_benchmark("custom", write_jsonl(tmp_path / "shared.jsonl", recs))
    assert [q.id for q in bench.questions] == ["0", "1", "2"]  # default ids: the record number
    assert len(bench.items) == 2 and bench.candidates["0"] == bench.candidates["1"]
    assert bench.questions[1].gold == {"custom:p": [1]} and bench.questions[0].gold == {}
    assert bench.questions[2].answers == []


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"question": "q", "anwsers": ["a"]}, "line 2 (id 'bad'): anwsers: unknown field (did you mean 'answers'?)"),
        ({"answers": ["a"]}, "line 2 (id 'bad'): question: missing"),
        ({"question": "q", "answers": "a", "answer": "b"}, "answer: give the answers in one field"),
        ({"question": "q", "split": "holdout"}, "split: 'holdout' is not one of train, val, dev"),
        ({"question": "q", "items": {"id": "p"}}, "items: expected a list of items, got dict"),
        ({"question": "q", "items": [{"title": "t"}]}, "items[0]: no payload: give one of text, sentences"),
        ({"question": "q", "items": [{"text": "a", "image": "b"}]}, "items[0]: one payload per item, got text and image"),
        ({"question": "q", "items": ["nowhere"]}, "items[0].id: 'nowhere' names no item defined in the dataset"),
        ({"question": "q", "items": [{"id": "p", "text": "Other text."}]},
         "items[0].id: 'p' was defined with other content at ok.jsonl, line 1"),
        ({"question": "q", "items": [{"text": "Alpha. Beta.", "gold_spans": ["Gamma"]}]},
         "items[0].gold_spans[0]: item 'custom:"),
        ({"question": "q", "items": [{"text": "Alpha. Beta.", "gold_offsets": [[3, 99]]}]},
         "items[0].gold_offsets[0]: item 'custom:"),
        ({"question": "q", "items": [{"text": "Alpha.", "gold_offsets": [3]}]},
         "items[0].gold_offsets[0]: expected [start, end] in character offsets, got 3"),
        ({"question": "q", "items": [{"text": "Alpha.", "gold_times": [[0, 1]]}]},
         "items[0].gold_times: is for video items; this item is text"),
        ({"question": "q", "items": [{"text": "Alpha.", "gold_leaves": [4]}]},
         "items[0].gold_leaves[0]: item 'custom:"),
        ({"question": "q", "items": [{"text": "Alpha.", "gold": "yes"}]}, "items[0].gold: expected true or false"),
        ({"question": "q", "items": [{"table": {"header": ["a"]}}]}, "items[0].table.rows: expected a non-empty list"),
        ({"question": "q", "items": [{"image": "missing.png"}]}, "items[0].image: file not found: "),
        ({"question": "q", "items": [{"video": {"path": VIDEO.name, "start": 9, "end": 3}}]},
         "items[0].video: clip bounds must satisfy 0 <= start < end, got start=9, end=3"),
        ({"question": "q", "items": [{"text": "Alpha.", "modality": "table"}]},
         "items[0].modality: 'table' but the payload is 'text' (text)"),
    ],
)  # fmt: skip
def test_malformed_record_is_one_error_naming_file_line_id_and_field(tmp_path, record, message) -> None:
    ok = {"id": "ok", "question": "fine?", "items": [{"id": "p", "text": "Alpha."}]}
    (tmp_path / VIDEO.name).symlink_to(VIDEO)  # media stay inside media_root (the data file's folder)
    path = tmp_path / "ok.jsonl"
    path.write_text(json.dumps(ok) + "\n\n" + json.dumps({"id": "bad", **record}) + "\n")
    with pytest.raises(DataFormatError) as err:
        load_benchmark("custom", path)
    text = str(err.value)
    assert text.startswith(f"{path}, line 3 (id 'bad'): "), text  # the blank line counts: an editor's line
    assert message.replace("line 2 (id 'bad'): ", "") in text, text
    assert err.value.line == 3 and err.value.record == 1
    # strict=false: the malformed record is counted and the others load
    bench = load_benchmark("custom", path, strict=False)
    assert [q.id for q in bench.questions] == ["ok"] and bench.skipped["malformed"] == 1


def test_split_field_and_split_files(tmp_path) -> None:
    recs = custom_records(6)
    for rec, split in zip(recs, ["train", "train", "dev", "validation", "test", None], strict=True):
        if split:
            rec["split"] = split
    bench = load_benchmark("custom", write_jsonl(tmp_path / "mixed.jsonl", recs))
    assert [q.meta.get("split") for q in bench.questions] == ["train", "train", "val", "val", "test", None]
    # named val questions are the val split (no val carved out of train)
    assert [q.id for q in split_questions(bench, "val")] == [recs[2]["id"], recs[3]["id"]]
    train = [q.id for q in split_questions(bench, "train")]
    assert train[:2] == [recs[0]["id"], recs[1]["id"]] and set(train[2:]) <= {recs[5]["id"]}  # 5: hash split
    folder = tmp_path / "splits"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", custom_records(4)[:2])
    write_jsonl(folder / "my-data.val.jsonl", custom_records(4)[2:3])
    write_jsonl(folder / "test.jsonl", custom_records(4)[3:])
    write_jsonl(folder / "latest.jsonl", [])  # "latest" is no split name; an empty file adds nothing
    bench = load_benchmark("custom", folder)
    assert [(q.meta["file"], q.meta.get("split")) for q in bench.questions] == [
        ("my-data.val.jsonl", "val"), ("test.jsonl", "test"), ("train.jsonl", "train"), ("train.jsonl", "train"),
    ]  # fmt: skip
    bench, test = load_split("custom", str(folder), "test")
    assert [q.id for q in test] == [custom_records(4)[3]["id"]]


def test_saved_hf_dataset_dict_loads_like_the_jsonl(tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    recs = custom_records(6)
    ref = load_benchmark("custom", write_jsonl(tmp_path / "mine.jsonl", recs))
    ds = datasets.Dataset.from_list(recs)
    folder = tmp_path / "saved"
    datasets.DatasetDict(
        {"train": ds.select(range(3)), "validation": ds.select(range(3, 4)), "test": ds.select(range(4, 6))}
    ).save_to_disk(str(folder))
    bench = load_benchmark("custom", folder)
    assert [(q.id, q.text, q.answers, q.gold) for q in bench.questions] == [
        (q.id, q.text, q.answers, q.gold) for q in ref.questions
    ]
    assert [q.meta["split"] for q in bench.questions] == ["train"] * 3 + ["val"] + ["test"] * 2
    assert bench.items == ref.items and bench.candidates == ref.candidates
    # a malformed row names the split and the row index
    bad = [*recs[:2], {**recs[2], "items": [{**recs[2]["items"][0], "gold_spans": ["not in the text"]}]}]
    datasets.Dataset.from_list(bad).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(DataFormatError, match=r"bad, record 2 \(id '.+'\): items\[0\]\.gold_spans\[0\]: .* not found"):
        load_benchmark("custom", tmp_path / "bad")


def test_gold_leaves_is_public_and_documented() -> None:
    item = Item("p1", "text", title="Paris", text="Paris is in France. It has 2.1 million people.")
    assert gold_leaves(item, ["2.1 million"]) == [1] and gold_leaves(item, [(0, 5)]) == [0]
    assert gold_leaves(item, ["paris IS"]) == [0]  # case and whitespace insensitive fallback
    with pytest.raises(ValueError, match="span 'Lyon' not found"):
        gold_leaves(item, ["Lyon"])
    import canopy_lit.data.readers as readers

    assert {"gold_leaves", "locate_sentences", "leaves_of"} <= set(readers.__all__)


# ---- readers from outside the package ---------------------------------------------------------------


class ThreeQuestions:
    """A reader class as a user would write it in their own package: one question per line of plain text."""

    def read(self, path: Path, name: str = "lines", prefix: str = "Q") -> Benchmark:
        bench = Benchmark(name, [], {}, {}, Counter(), {})
        for n, line in enumerate(Path(path).read_text().splitlines()):
            question, answer, passage = line.split("\t")
            item = Item(f"{name}:{n}", Modality.TEXT, title="", text=passage)
            bench.items[item.id] = item
            gold = {item.id: gold_leaves(item, [answer])}
            bench.add_question(Question(f"{prefix}{n}", question, [answer], name, gold), [item.id])
        return bench


def read_lines(path: Path, name: str = "lines") -> Benchmark:
    return ThreeQuestions().read(path, name)


@pytest.fixture
def lines_file(tmp_path) -> Path:
    path = tmp_path / "three.tsv"
    path.write_text(
        "Where is it?\tParis\tIt stands. It is in Paris.\n"
        "Who built it?\tEiffel\tEiffel built it. Long ago.\n"
        "When?\t1889\tIt opened. That was in 1889.\n"
    )
    return path


@pytest.mark.parametrize("reader", [f"{__name__}.ThreeQuestions", f"{__name__}.read_lines", read_lines])
def test_dotted_reader_path_reads_without_a_registry_edit(lines_file, reader) -> None:
    before = dict(BENCHMARKS)
    bench, questions = load_split("mine", str(lines_file), "all", reader=reader)
    assert before == BENCHMARKS  # no registry entry added
    assert bench.name == "mine" and [q.id for q in questions] == ["Q0", "Q1", "Q2"]  # the label reaches `name`
    assert [q.gold for q in questions] == [{"mine:0": [1]}, {"mine:1": [0]}, {"mine:2": [1]}]
    if isinstance(reader, str) and reader.endswith("ThreeQuestions"):
        assert load_benchmark("mine", lines_file, reader=reader, prefix="R").questions[0].id == "R0"
        with pytest.raises(ValueError, match=r"unknown reader option\(s\) \['prefx'\]"):
            load_benchmark("mine", lines_file, reader=reader, prefx="R")


def test_reader_errors_and_registration(lines_file) -> None:
    with pytest.raises(ImportError, match="reader 'nopkg.readers.X' does not import"):
        load_benchmark("mine", lines_file, reader="nopkg.readers.X")
    with pytest.raises(ImportError, match=f"module '{__name__}' has no 'Nothing'"):
        load_benchmark("mine", lines_file, reader=f"{__name__}.Nothing")
    with pytest.raises(KeyError, match="or name its reader"):
        load_benchmark("mine", lines_file)
    try:
        register_benchmark("lines_test", f"{__name__}.ThreeQuestions", "three lines")
        assert len(load_benchmark("lines_test", lines_file).questions) == 3
        with pytest.raises(ValueError, match="already registered"):
            register_benchmark("lines_test", read_lines)
    finally:
        BENCHMARKS.pop("lines_test", None)
    # a registered reader under another label: the custom reader names its items after the label
    custom = write_jsonl(lines_file.with_suffix(".jsonl"), custom_records(1))
    assert next(iter(load_benchmark("my_qa", custom, reader="custom").items)).startswith("my_qa:")


def test_config_names_the_reader_and_checks_its_options(lines_file) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from canopy_lit.schema import ConfigError, validate_eval_config

    def problems(*overrides: str) -> list[str]:
        GlobalHydra.instance().clear()
        with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
            cfg = compose("evaluate", overrides=["data=custom", f"data.path={lines_file}", *overrides])
        try:
            validate_eval_config(cfg)
        except ConfigError as err:
            return err.problems
        return []

    assert problems() == []
    assert problems(f"data.reader={__name__}.ThreeQuestions", "data.name=mine", "+data.options.prefix=R") == []
    assert problems("+data.options.strict=false", "+data.options.media_root=/tmp") == []
    assert problems("data.name=mine", "data.reader=custom") == []
    found = problems("data.reader=nopkg.X", "data.name=mine")
    assert len(found) == 1 and found[0].startswith("data.reader: reader 'nopkg.X' does not import"), found
    found = problems(f"data.reader={__name__}.ThreeQuestions", "data.name=mine", "+data.options.strict=false")
    assert len(found) == 1 and found[0].startswith("unknown config key data.options.strict"), found
    assert problems("data.name=mine") == []  # data/custom.yaml names its reader: any label reads with it
    found = problems("data.name=mine", "data.reader=null")
    assert len(found) == 1 and "or name its reader: data.reader=" in found[0], found


def test_ircot_demonstrations_come_from_a_labelled_custom_file(tmp_path) -> None:
    from canopy_lit.control import ircot
    from canopy_lit.hierarchy import Hierarchy

    recs = custom_records(8)
    for n, rec in enumerate(recs):
        rec["split"] = "train" if n < 5 else "test"
    path = write_jsonl(tmp_path / "mine.jsonl", recs)
    data = {"name": "my_qa", "reader": "custom", "path": str(path), "split": "test", "seed": 0, "options": {}}
    demos = ircot.load_demos(data, 2, Hierarchy(2))
    assert [d.question for d in demos] == [r["question"] for r in recs[:2]]  # from the train split, in order
