"""Reader plumbing on small files: streaming, layouts, error messages, gold helpers, splits, CLI errors.

Records are hand-written here (named so) unless they say they come from the bundled data.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from canopy_lit.data import Benchmark, DataFormatError, load_benchmark, split_questions
from canopy_lit.data.__main__ import main
from canopy_lit.data.readers import _io
from canopy_lit.data.readers._gold import clip_leaves, find_span, leaves_of, locate_sentences, numbers_in
from canopy_lit.data.readers.lvbench import split_choices
from canopy_lit.data.readers.tatqa import split_header, table_gold_rows
from canopy_lit.data.splits import assign_splits, groups
from canopy_lit.hierarchy import VideoTreeBuilder
from canopy_lit.types import Item, Question, VideoRef

# A hand-written record in the official HotpotQA list layout.
HANDWRITTEN_HOTPOT = {
    "_id": "hand-1",
    "question": "Which river flows through the city where the museum is?",
    "answer": "Thames",
    "supporting_facts": [["Museum", 1], ["City", 0]],
    "context": [
        ["Museum", ["The museum opened in 1900.", " It stands in London."]],
        ["City", ["London lies on the Thames.", " It is large."]],
        ["Other", ["Unrelated text."]],
    ],
}


def write(path: Path, obj, gz: bool = False) -> Path:
    data = json.dumps(obj).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# ---- streaming ----------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_json_array_streams_identically_across_chunk_boundaries(tmp_path, monkeypatch, chunk) -> None:
    records = [1, 23, 456.5, "s,]", {"a": [7890, {"b": "]["}]}, [], -12, True, None]
    path = tmp_path / "x.json"
    path.write_text("  \n" + json.dumps(records, indent=1))
    monkeypatch.setattr(_io, "_CHUNK", chunk)
    assert list(_io.iter_records(path)) == records


def test_jsonl_and_gz_and_json_named_jsonl_content(tmp_path) -> None:
    rows = [{"i": i} for i in range(5)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress("\n".join(json.dumps(r) for r in rows).encode()))
    (tmp_path / "c.json").write_text("\n".join(json.dumps(r) for r in rows))
    for name in ("a.jsonl", "b.jsonl.gz", "c.json"):
        assert list(_io.iter_records(tmp_path / name)) == rows


def test_truncated_json_array_names_file_and_record(tmp_path, monkeypatch) -> None:
    path = tmp_path / "cut.json"
    path.write_text(json.dumps([HANDWRITTEN_HOTPOT, HANDWRITTEN_HOTPOT])[:-40])
    monkeypatch.setattr(_io, "_CHUNK", 50)
    with pytest.raises(DataFormatError, match=r"cut\.json, record 1: invalid or truncated JSON"):
        list(_io.iter_records(path))


def test_truncated_gzip_names_file_and_record(tmp_path) -> None:
    rows = [{"question": f"q{i}", "pad": "x" * 200} for i in range(200)]
    blob = gzip.compress("\n".join(json.dumps(r) for r in rows).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataFormatError, match=r"cut\.jsonl\.gz, record \d+: truncated or corrupt gzip"):
        list(_io.iter_records(path))


def test_missing_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="benchmark file not found"):
        load_benchmark("nq", tmp_path / "nope.jsonl.gz")


# ---- HotpotQA-format layouts and malformed records ----------------------------------------------


def test_handwritten_hotpot_record_gold_and_candidates(tmp_path) -> None:
    bench = load_benchmark("hotpotqa", write(tmp_path / "hand.json", [HANDWRITTEN_HOTPOT]))
    (q,) = bench.questions
    assert q.gold == {"hotpotqa:Museum": [1], "hotpotqa:City": [0]}
    assert bench.candidates[q.id] == ["hotpotqa:Museum", "hotpotqa:City", "hotpotqa:Other"]
    assert leaves_of(bench.items["hotpotqa:Museum"])[1].text == "It stands in London."
    assert "split" not in q.meta  # "hand.json" names no split: hash-split like any other benchmark


def test_hf_records_and_columns_layouts_give_the_same_benchmark(tmp_path) -> None:
    r = HANDWRITTEN_HOTPOT
    hf = {
        "id": r["_id"],
        "question": r["question"],
        "answer": r["answer"],
        "supporting_facts": {
            "title": [t for t, _ in r["supporting_facts"]],
            "sent_id": [s for _, s in r["supporting_facts"]],
        },
        "context": {"title": [t for t, _ in r["context"]], "sentences": [s for _, s in r["context"]]},
    }
    columns = {k: [v] for k, v in hf.items()}
    ref = load_benchmark("hotpotqa", write(tmp_path / "official.json", [r]))
    for name, obj in (("records.jsonl", None), ("columns.json", columns)):
        path = tmp_path / name
        if obj is None:
            path.write_text(json.dumps(hf) + "\n")
        else:
            write(path, obj)
        got = load_benchmark("hotpotqa", path)
        assert [q.gold for q in got.questions] == [q.gold for q in ref.questions]
        assert got.items.keys() == ref.items.keys()


def test_missing_key_names_file_record_and_id(tmp_path) -> None:
    bad = {k: v for k, v in HANDWRITTEN_HOTPOT.items() if k != "question"} | {"_id": "hand-2"}
    path = write(tmp_path / "bad.json", [HANDWRITTEN_HOTPOT, bad])
    with pytest.raises(DataFormatError) as err:
        load_benchmark("hotpotqa", path)
    msg = str(err.value)
    assert "bad.json" in msg and "record 1" in msg and "hand-2" in msg and "question" in msg


def test_wrong_type_names_the_field(tmp_path) -> None:
    bad = dict(HANDWRITTEN_HOTPOT, context="not a list")
    with pytest.raises(DataFormatError, match=r"record 0 \(id 'hand-1'\).*context"):
        load_benchmark("hotpotqa", write(tmp_path / "bad.json", [bad]))


def test_non_strict_counts_malformed_records(tmp_path) -> None:
    bad = {"_id": "x", "question": 3, "context": []}
    bench = load_benchmark(
        "hotpotqa", write(tmp_path / "mixed.json", [bad, HANDWRITTEN_HOTPOT]), strict=False
    )
    assert len(bench.questions) == 1 and bench.skipped["malformed"] == 1


def test_out_of_range_supporting_fact_is_counted_not_fatal(tmp_path) -> None:
    rec = dict(HANDWRITTEN_HOTPOT, supporting_facts=[["Museum", 7], ["Nowhere", 0], ["City", 0]])
    bench = load_benchmark("hotpotqa", write(tmp_path / "r.json", [rec]))
    assert bench.questions[0].gold == {"hotpotqa:Museum": [], "hotpotqa:City": [0]}
    assert bench.skipped == Counter(gold_sentence_out_of_range=1, gold_title_not_in_context=1)


def test_unknown_benchmark_and_option_are_clear(tmp_path) -> None:
    with pytest.raises(KeyError, match="unknown benchmark"):
        load_benchmark("squad")
    with pytest.raises(ValueError, match="unknown reader option"):
        load_benchmark("hotpotqa", write(tmp_path / "a.json", [HANDWRITTEN_HOTPOT]), video_root="x")


def test_cli_bad_input_exits_2_with_file_and_record(tmp_path, capsys) -> None:
    path = write(tmp_path / "broken.json", [HANDWRITTEN_HOTPOT, {"_id": "b"}])
    assert main(["stats", "--benchmark", "hotpotqa", "--path", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "broken.json, record 1" in err and "Traceback" not in err


def test_cli_json_keys_on_a_small_file(tmp_path, capsys) -> None:
    path = write(tmp_path / "hand.json", [HANDWRITTEN_HOTPOT])
    assert main(["stats", "--json", "--benchmark", "hotpotqa", "--path", str(path), "--branching", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["hotpotqa"]
    assert {"questions", "questions_with_gold", "items", "instances", "pairs"} <= s.keys()
    # Museum: 2 leaves, gold [1] -> root partly gold: 3 pairs; City: gold [0] -> 3 pairs.
    assert (s["questions"], s["items"], s["instances"], s["pairs"], s["branching"]) == (1, 3, 2, 6, 3)


# ---- gold helpers ----------------------------------------------------------------------------------


def test_find_span_exact_then_case_and_space_insensitive() -> None:
    text = "Prime Suspect was devised by Lynda La Plante . It ran on ITV ."
    assert find_span(text, "Lynda La Plante") == (29, 44)
    s, e = find_span(text, "la plante.")
    assert text[s:e] == "La Plante ."
    assert find_span(text, "BBC") is None and find_span(text, "  ") is None


def test_locate_sentences_maps_offsets_to_blingfire_leaves() -> None:
    item = Item(
        "x", "text", text="The first prize went to Röntgen. It was 1901. Later prizes followed in 1902."
    )
    leaves = leaves_of(item)
    assert len(leaves) == 3
    assert locate_sentences(item, ["1901"]) == [1]
    assert locate_sentences(item, ["Röntgen. It was"]) == [0, 1]  # a span across two sentences
    assert locate_sentences(item, ["1903"]) == []


def test_clip_leaves_overlap_and_point_reference() -> None:
    item = Item("v", "video", video=VideoRef("none.mp4", 0.0, 95.0))
    leaves = VideoTreeBuilder().leaves(item)  # [0,30) [30,60) [60,90) [90,95)
    assert clip_leaves(leaves, 1875, 1876) == []
    assert clip_leaves(leaves, 45, 45) == [1]
    assert clip_leaves(leaves, 30, 60) == [1]
    assert clip_leaves(leaves, 29, 61) == [0, 1, 2]
    assert clip_leaves(leaves, 95, 95) == [3]


def test_numbers_and_tatqa_table_gold_rows() -> None:
    assert numbers_in("$  1,452.4") == [1452.4] and numbers_in("(3.5)%") == [3.5] and numbers_in("n/a") == []
    # Table rows from the bundled TAT-QA dev file's first document.
    raw = [
        ["", "", "Years Ended September 30,", ""],
        ["", "2019", "2018", "2017"],
        ["Fixed Price", "$  1,452.4", "$  1,146.2", "$  1,036.9"],
        ["Other", "44.1", "56.7", "70.8"],
        ["Total sales", "$1,496.5", "$1,202.9", "$1,107.7"],
    ]
    header, rows = split_header(raw)
    assert header == ["", "2019", "Years Ended September 30, 2018", "2017"] and len(rows) == 3
    assert table_gold_rows(rows, ["$1,496.5"], []) == [2]
    assert table_gold_rows(rows, ["-12.6"], [44.1, 56.7]) == [1]
    assert table_gold_rows(rows, ["Other"], []) == [1]
    assert table_gold_rows(rows, ["2019"], []) == []  # a header value is not a row


def test_split_choices() -> None:
    q = "What did she do?\n(A) She lies down\n(B) She sticks out her tongue\n(C) She squats"
    assert split_choices(q) == (
        "What did she do?",
        ["She lies down", "She sticks out her tongue", "She squats"],
        ["A", "B", "C"],
    )


# ---- splits -------------------------------------------------------------------------------------------


def _bench(docs: list[list[str]], fixed: list[str | None] | None = None) -> Benchmark:
    qs = []
    for i, ds in enumerate(docs):
        meta = {"doc": ds}
        if fixed and fixed[i]:
            meta["split"] = fixed[i]
        qs.append(Question(f"q{i}", "?", [], "b", {d: [0] for d in ds[:1]}, meta=meta))
    return Benchmark("b", qs, {}, {})


def test_groups_merge_questions_that_share_any_document() -> None:
    g = groups(_bench([["a", "b"], ["c"], ["b", "d"], ["d"], ["e"]]).questions)
    assert g["q0"] == g["q2"] == g["q3"] == "a" and g["q1"] == "c" and g["q4"] == "e"


def test_splits_are_deterministic_disjoint_by_document_and_cover_everything() -> None:
    docs = [[f"doc{i % 37}", f"page{i % 11}"] if i % 3 else [f"doc{i % 37}"] for i in range(300)]
    bench = _bench(docs)
    parts = {s: split_questions(bench, s) for s in ("train", "val", "test")}
    assert sum(len(p) for p in parts.values()) == len(bench.questions) == len(split_questions(bench, "all"))
    seen: dict[str, str] = {}
    for s, qs in parts.items():
        for q in qs:
            for d in q.meta["doc"]:
                assert seen.setdefault(d, s) == s, f"document {d} spans two splits"
    assert assign_splits(bench) == assign_splits(_bench(docs))  # same input, same split
    many = _bench([[f"d{i}"] for i in range(2000)])
    a, b = assign_splits(many, seed=0), assign_splits(many, seed=1)
    assert a != b
    share = Counter(a.values())
    assert 0.75 < share["train"] / 2000 < 0.85 and 0.07 < share["test"] / 2000 < 0.13


def test_fixed_splits_are_kept_and_val_is_carved_from_train() -> None:
    n = 400
    bench = _bench(
        [[f"d{i}"] for i in range(n)] + [["shared"], ["shared"]], ["train"] * n + ["train", "test"]
    )
    assigned = assign_splits(bench)
    assert assigned[f"q{n + 1}"] == "test" and assigned[f"q{n}"] is None  # shares a document with test
    assert set(list(assigned.values())[:n]) == {"train", "val"}
    with pytest.raises(ValueError, match="split must be"):
        split_questions(bench, "dev")


def test_extra_items_join_the_pool_with_media_paths_resolved(tmp_path) -> None:
    import json

    from canopy_lit.data.benchmark import load_extra_items

    good = tmp_path / "items.json"
    good.write_text(json.dumps([{"id": "img1", "modality": "image", "image": "photos/a.png"}]))
    (item,) = load_extra_items(good, root="/media")
    assert item.id == "img1" and item.image == "/media/photos/a.png"
    assert load_extra_items(good)[0].image == str(tmp_path / "photos/a.png")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "ok", "modality": "image", "image": "a.png"}, {"id": "x", "modality": "image"}]))
    with pytest.raises(DataFormatError, match=r"bad\.json, record 1 \(id 'x'\)"):
        load_extra_items(bad)


DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.mark.parametrize(
    ("name", "source", "id_key"),
    [("hotpotqa", "hotpotqa/hotpot_dev_distractor_100.json", "_id"), ("nq", "nq/nq-open-oracle.jsonl.gz", "id"),
     ("ottqa", "ottqa/dev.traced.json", "question_id"), ("mmqa", "mmqa/MMQA_dev.jsonl.gz", "qid"),
     ("lvbench", "lvbench/lvbench_universalrag.json", "index"),
     ("vragbench", "fixtures/vragbench_example.jsonl", "id")],
)  # fmt: skip
def test_every_reader_keeps_the_first_record_of_a_repeated_question_id(tmp_path, name, source, id_key) -> None:
    """Bundled records, the second given the first's id: one shared rule (``Benchmark.add_question``)."""
    recs = list(_io.iter_records(DATA / source))[:3]
    recs[0][id_key] = recs[1][id_key] = "repeated-id"
    bench = load_benchmark(name, write(tmp_path / f"{name}.json", recs))
    assert [q.id for q in bench.questions].count("repeated-id") == 1 and len(bench.questions) == 2
    assert bench.skipped["duplicate_question"] == 1
    assert next(q for q in bench.questions if q.id == "repeated-id").text in json.dumps(recs[0], ensure_ascii=False)


def test_benchmark_built_from_a_list_keeps_ids_unique() -> None:
    qs = [Question("a", "first?", ["x"], "b"), Question("a", "second?", ["y"], "b"), Question("c", "c?", [""], "b")]
    bench = Benchmark("b", qs, {}, {})
    assert [q.text for q in bench.questions] == ["first?", "c?"] and bench.skip_metrics() == {
        "data/skipped/duplicate_question": 1.0}
    assert [q.id for q in bench.answered(bench.questions)] == ["a"]
    assert bench.skip_metrics()["data/skipped/no_answer"] == 1.0
