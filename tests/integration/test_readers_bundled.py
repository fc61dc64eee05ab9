"""Readers on the real bundled files: counts, gold resolution, splits, configs and the stats CLI contract."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from canopy_lit.data import (
    BENCHMARKS,
    DataFormatError,
    assign_splits,
    bundled_benchmarks,
    load_benchmark,
    load_split,
    split_questions,
)
from canopy_lit.data.readers._gold import find_span, leaves_of
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import training_instances

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundled() -> dict:
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_benchmark(name)
        return cache[name]

    return get


def test_hotpotqa_every_question_has_gold_matching_the_raw_supporting_facts(bundled, data_dir) -> None:
    bench = bundled("hotpotqa")
    assert len(bench.questions) == 200 and not bench.skipped
    raw = {}
    for name in ("hotpot_train_100.json", "hotpot_dev_distractor_100.json"):
        raw.update({r["_id"]: r for r in json.loads((data_dir / "hotpotqa" / name).read_text())})
    n_facts = 0
    for q in bench.questions:
        assert q.gold and all(q.gold.values())
        r = raw[q.id]
        ctx = dict((t, s) for t, s in r["context"])
        want = sorted((t, ctx[t][i].strip()) for t, i in r["supporting_facts"])
        got = sorted(
            (bench.items[k].title, leaves_of(bench.items[k])[i].text) for k, v in q.gold.items() for i in v
        )
        assert got == want
        assert set(q.gold) <= set(bench.candidates[q.id]) and len(bench.candidates[q.id]) == len(r["context"])
        n_facts += len(got)
    assert n_facts == 249 + 229  # supporting sentences of the dev and train files (data/README)


def test_hotpotqa_train_file_trains_and_dev_file_tests(bundled) -> None:
    bench = bundled("hotpotqa")
    test = split_questions(bench, "test")
    train, val = split_questions(bench, "train"), split_questions(bench, "val")
    assert {q.meta["file"] for q in test} == {"hotpot_dev_distractor_100.json"} and len(test) == 100
    assert {q.meta["file"] for q in train + val} == {"hotpot_train_100.json"} and len(train) + len(val) == 100
    assert val, "val is carved from the train file"


def test_nq_gold_sentences_hold_a_short_answer(bundled) -> None:
    bench = bundled("nq")
    assert len(bench.questions) == 2655
    located = [q for q in bench.questions if any(q.gold.values())]
    assert len(located) / len(bench.questions) >= 0.95
    for q in located:
        ((item_id, gold),) = q.gold.items()
        leaves = leaves_of(bench.items[item_id])
        span_text = " ".join(leaves[i].text for i in range(min(gold), max(gold) + 1))
        assert any(find_span(span_text, a) for a in q.meta["short_answers"] + q.answers), q.id
        assert bench.candidates[q.id] == [item_id]


def test_ottqa_gold_rows_hold_the_answer_cell_and_passages_the_answer(bundled, data_dir) -> None:
    bench = bundled("ottqa")
    assert len(bench.questions) == 2214 and sum(1 for q in bench.questions if q.gold) == 2214
    raw = {r["question_id"]: r for r in json.loads((data_dir / "ottqa" / "dev.traced.json").read_text())}
    for q in bench.questions[:400]:
        table_id = f"ottqa:{raw[q.id]['table_id']}"
        assert bench.candidates[q.id][0] == table_id
        for text, (row, _), _, kind in raw[q.id]["answer-node"]:
            if kind == "table":
                assert row in q.gold[table_id]
                assert any(find_span(cell, text) for cell in bench.items[table_id].table.rows[row])
        for item_id, gold in q.gold.items():
            if item_id != table_id and gold:
                leaves = leaves_of(bench.items[item_id])
                # An answer may straddle a sentence boundary ("Sgt . | Wells"): check the gold stretch.
                assert find_span(" ".join(leaves[i].text for i in range(gold[0], gold[-1] + 1)), q.answers[0])


def test_tatqa_documents_paragraph_gold_and_table_gold(bundled, data_dir) -> None:
    bench = bundled("tatqa")
    docs = json.loads((data_dir / "tatqa" / "tatqa_dataset_dev.json").read_text())
    assert len(docs) == 278 and len(bench.questions) == 1668
    by_id = {q.id: q for q in bench.questions}
    for doc in docs:
        paras = {str(p["order"]): f"tatqa:{p['uid']}" for p in doc["paragraphs"]}
        for rq in doc["questions"]:
            q = by_id[rq["uid"]]
            assert {paras[o] for o in rq["rel_paragraphs"]} <= set(q.gold)  # every rel_paragraph resolves
            assert ("tatqa:" + doc["table"]["uid"] in q.gold) == ("table" in rq["answer_from"])
    share = sum(1 for q in bench.questions if any(q.gold.values())) / len(bench.questions)
    assert share > 0.9


def test_mmqa_and_lvbench_without_contexts_or_videos_load_and_count(bundled) -> None:
    mmqa = bundled("mmqa")
    assert len(mmqa.questions) == 2441 and not mmqa.items
    assert mmqa.skipped["gold_context_unavailable"] == 2441
    assert all(q.meta["gold_ids"] and q.answers for q in mmqa.questions)
    lv = bundled("lvbench")
    assert len(lv.questions) == 829 and lv.skipped["missing_video"] == 829 and not lv.items
    q = lv.questions[0]
    assert q.answers == ["A"] and len(q.choices) == 4 and q.meta["time_reference"] == [1875.0, 1876.0]


def test_lvbench_with_a_duration_map_gets_gold_clips_without_the_files(data_dir) -> None:
    bench = load_benchmark("lvbench", durations={"vaL_vSdZKZo": 3600.0})
    q = next(q for q in bench.questions if q.id == "lvbench_840")
    assert q.gold == {"lvbench:vaL_vSdZKZo": [62]}  # 1875 s lies in the clip [1860, 1890)
    assert bench.items["lvbench:vaL_vSdZKZo"].meta["available"] is False
    assert bench.skipped["missing_video"] == 829 - sum(1 for x in bench.questions if x.gold)


def test_vragbench_fixture_over_bundled_videos(data_dir) -> None:
    bench = load_benchmark(
        "vragbench",
        data_dir / "fixtures" / "vragbench_example.jsonl",
        video_root=data_dir / "media" / "video",
    )
    gold = {q.id: q.gold for q in bench.questions}
    assert gold["handwritten-vtest-lawn"] == {"vragbench:vtest": [1]}  # 79.5 s -> 3 clips, 52-58 s in the 2nd
    assert gold["handwritten-tree-hand"] == {"vragbench:tree": [0]}
    assert gold["handwritten-absent-with-duration"] == {"vragbench:not_bundled": [3, 4]}
    assert gold["handwritten-absent-no-duration"] == {}
    assert bench.skipped["missing_video"] == 1
    inst = training_instances(bench.questions, bench.items, Hierarchy(2))
    assert {x.question_id for x in inst} == {"handwritten-vtest-lawn", "handwritten-absent-with-duration"}


def test_hotpot_format_fixtures_converted_from_bundled_records(data_dir) -> None:
    fx = data_dir / "fixtures"
    wiki = load_benchmark("2wikimultihopqa", fx / "hotpot_format_2wiki_layout_from_bundled.json")
    mus = load_benchmark("musique", fx / "hotpot_format_musique_hf_layout_from_bundled.jsonl")
    ref = load_benchmark("hotpotqa")
    ref_gold = {q.id: {k.split(":", 1)[1]: v for k, v in q.gold.items()} for q in ref.questions}
    for bench in (wiki, mus):
        assert len(bench.questions) == 3
        for q in bench.questions:
            assert q.benchmark == bench.name and all(k.startswith(bench.name + ":") for k in q.gold)
            assert {k.split(":", 1)[1]: v for k, v in q.gold.items()} == ref_gold[q.id]


def test_truncated_bundled_gzip_and_malformed_bundled_record(tmp_path, data_dir) -> None:
    blob = (data_dir / "nq" / "nq-open-oracle.jsonl.gz").read_bytes()
    cut = tmp_path / "nq-cut.jsonl.gz"
    cut.write_bytes(blob[: len(blob) // 3])
    with pytest.raises(DataFormatError, match=r"nq-cut\.jsonl\.gz, record \d+"):
        load_benchmark("nq", cut)
    with gzip.open(data_dir / "nq" / "nq-open-oracle.jsonl.gz", "rt") as f:
        rows = [json.loads(next(f)) for _ in range(3)]
    del rows[2]["nq_annotated_gold"]["long_answer"]
    bad = tmp_path / "nq-bad.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DataFormatError, match=r"nq-bad\.jsonl, record 2: missing key 'long_answer'"):
        load_benchmark("nq", bad)


@pytest.mark.parametrize("name", ["nq", "ottqa", "tatqa", "lvbench"])
def test_splits_of_bundled_data_are_disjoint_by_document(bundled, name) -> None:
    bench = bundled(name)
    assigned = assign_splits(bench)
    owner: dict[str, str] = {}
    for q in bench.questions:
        docs = set(q.gold) | {q.meta["doc"]}
        for d in docs:
            assert owner.setdefault(d, assigned[q.id]) == assigned[q.id], f"{d} in two splits"
    assert set(assigned.values()) == {"train", "val", "test"}


def test_instances_are_the_same_for_trees_built_at_any_b_from_the_same_leaves(bundled) -> None:
    bench = bundled("hotpotqa")
    for b in (2, 3):
        inst = training_instances(bench.questions[:20], bench.items, Hierarchy(b))
        assert inst and all(x.tree.branching == b for x in inst)


def test_every_data_config_resolves_to_a_loadable_benchmark(tmp_path) -> None:
    paths = OmegaConf.create({"paths": {"data_dir": str(ROOT / "data")}})
    names = set()
    for yaml in sorted((ROOT / "configs" / "data").glob("*.yaml")):
        cfg = OmegaConf.merge(paths, {"data": OmegaConf.load(yaml)})
        data = OmegaConf.to_container(cfg.data, resolve=True)
        assert set(data) - {"reader"} == {"name", "path", "split", "seed", "options"}, yaml.name
        assert data["name"] in BENCHMARKS, yaml.name
        names.add(data["name"])
        if data["path"] is None:  # a format for the user's own file (data=custom): nothing bundled to load
            assert BENCHMARKS[data["name"]].bundled is None, yaml.name
            continue
        assert Path(data["path"]).exists(), yaml.name
        if data["name"] in ("hotpotqa", "vragbench", "lvbench"):  # cheap ones load fully
            bench, qs = load_split(**data)
            assert qs and bench.name == data["name"]
    assert set(bundled_benchmarks()) <= names


def test_stats_cli_json_contract_over_all_bundled_data() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "canopy_lit.data", "stats", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert set(stats) == set(bundled_benchmarks())
    for name, s in stats.items():
        assert {"questions", "questions_with_gold", "items", "instances", "pairs"} <= s.keys(), name
        assert s["pairs"] >= s["instances"] >= 0
    assert stats["hotpotqa"]["questions_with_gold"] == stats["hotpotqa"]["questions"] == 200
    assert stats["nq"]["questions_with_located_gold"] >= 0.95 * stats["nq"]["questions"]


def test_tatqa_test_file_layout_without_answers_runs_through_stats(tmp_path, data_dir, capsys) -> None:
    """The official TAT-QA test file carries questions without answers/derivations: same reader, no gold."""
    from canopy_lit.data.__main__ import main

    docs = json.loads((data_dir / "tatqa" / "tatqa_dataset_dev.json").read_text())[:20]
    keep = ("uid", "order", "question")
    for doc in docs:
        doc["questions"] = [{k: q[k] for k in keep} for q in doc["questions"]]
    path = tmp_path / "tatqa_dataset_test.json"
    path.write_text(json.dumps(docs))
    assert main(["stats", "--json", "--benchmark", "tatqa", "--path", str(path)]) == 0
    s = json.loads(capsys.readouterr().out)["tatqa"]
    n = sum(len(d["questions"]) for d in docs)
    assert (s["questions"], s["questions_with_gold"], s["instances"]) == (n, 0, 0)
    assert s["skipped"] == {"no_gold_annotation": n}


def test_mmqa_with_handwritten_context_files_resolves_gold(tmp_path, data_dir) -> None:
    """Bundled MMQA questions + HAND-WRITTEN placeholder context files in the official layouts
    (the real MMQA texts/tables/images are not available here)."""
    table_id, text_id, image_id = (
        "8513db80c11ea439ab11eba406ec00d9",
        "5346073795a986f7bbbacbd4b197a787",
        "ddf8b52a8400deaf05940c5cad8169cd",
    )
    table = {
        "id": table_id,
        "title": "Placeholder filmography",
        "table": {
            "table_name": "Filmography",
            "header": [{"column_name": "Year"}, {"column_name": "Title"}, {"column_name": "Role"}],
            "table_rows": [[{"text": f"r{i}c{j}", "links": []} for j in range(3)] for i in range(15)],
        },
    }
    text = "Opening sentence is. In 1976 it was shown. A closing sentence."
    assert text.encode().find(b"1976") == 24  # the bundled record's start_byte
    (tmp_path / "tables.jsonl").write_text(json.dumps(table) + "\n")
    (tmp_path / "texts.jsonl").write_text(
        json.dumps({"id": text_id, "title": "Placeholder film", "text": text}) + "\n"
    )
    (tmp_path / "images.jsonl").write_text(
        json.dumps({"id": image_id, "title": "Poster", "path": "chelsea.png"}) + "\n"
    )
    bench = load_benchmark(
        "mmqa",
        texts=tmp_path / "texts.jsonl",
        tables=tmp_path / "tables.jsonl",
        images=tmp_path / "images.jsonl",
        images_dir=data_dir / "media" / "images",
    )
    by_id = {q.id: q for q in bench.questions}
    assert by_id["a33985b1e8b2502fc18cc8147dc27db8"].gold == {f"mmqa:{table_id}": [12]}
    # Compose(TextQ, TableQ): the table row comes from the intermediate answer, the sentence from start_byte.
    assert by_id["710a6d2254076ea58756c6c7cc211f1e"].gold == {f"mmqa:{table_id}": [6], f"mmqa:{text_id}": [1]}
    assert by_id["18ecd2ac6c0ac69993b92dc4b30137e8"].gold == {f"mmqa:{image_id}": [0]}
    assert set(bench.items) == {f"mmqa:{table_id}", f"mmqa:{text_id}", f"mmqa:{image_id}"}
    assert f"mmqa:{table_id}" in bench.candidates["a33985b1e8b2502fc18cc8147dc27db8"]
