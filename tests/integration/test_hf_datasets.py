"""Hugging Face ``datasets`` on disk: bundled data re-laid-out in the hub layouts loads like the official files.

Every fixture is written to ``tmp_path`` from the bundled files (no hub access): HotpotQA dev as
``hotpot_qa`` parquet / ``save_to_disk``, the same records as MuSiQue and 2Wiki layouts, NQ as ``nq_open``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

from canopy_lit.data import load_benchmark  # noqa: E402
from canopy_lit.data.readers import DataFormatError  # noqa: E402
from canopy_lit.data.readers.hf import detect_layout, is_hf_dataset  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data"
HOTPOT_DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_100.json"


def hotpot_hf(rec: dict) -> dict:
    """An official HotpotQA record in the ``hotpot_qa`` hub layout (dict-of-lists facts and context)."""
    return {
        "id": rec["_id"],
        "question": rec["question"],
        "answer": rec["answer"],
        "type": rec["type"],
        "level": rec["level"],
        "supporting_facts": {
            "title": [t for t, _ in rec["supporting_facts"]],
            "sent_id": [i for _, i in rec["supporting_facts"]],
        },
        "context": {"title": [t for t, _ in rec["context"]], "sentences": [s for _, s in rec["context"]]},
    }


def view(bench) -> list[tuple]:
    return [
        (q.id, q.text, q.answers, q.gold, q.meta.get("split"), q.meta.get("doc")) for q in bench.questions
    ]


@pytest.fixture(scope="module")
def official():
    return json.loads(HOTPOT_DEV.read_text())


@pytest.fixture(scope="module")
def reference():
    return load_benchmark("hotpotqa", HOTPOT_DEV)


def test_parquet_in_hub_layout_loads_like_the_official_json(tmp_path, official, reference) -> None:
    path = tmp_path / "validation-00000-of-00001.parquet"
    datasets.Dataset.from_list([hotpot_hf(r) for r in official]).to_parquet(str(path))
    assert is_hf_dataset(path) and not is_hf_dataset(HOTPOT_DEV)
    bench = load_benchmark("hotpotqa", path)  # dispatched to the HF reader by the file type
    assert bench.meta["reader"] == "hf" and len(bench.questions) == 100
    assert view(bench) == view(reference)  # ids, questions, answers, gold leaves, split (validation -> test)
    assert bench.items == reference.items and bench.candidates == reference.candidates
    assert sum(len(g) for q in bench.questions for g in q.gold.values()) > 200  # gold is not trivially empty


def test_save_to_disk_dataset_dict_loads_every_split(tmp_path, official, reference) -> None:
    folder = tmp_path / "hotpot_qa_distractor"
    ds = datasets.Dataset.from_list([hotpot_hf(r) for r in official])
    datasets.DatasetDict(
        {"train": ds.select(range(40)), "validation": ds.select(range(40, 100))}
    ).save_to_disk(str(folder))
    bench = load_benchmark("hotpotqa", folder)
    assert [q.id for q in bench.questions] == [q.id for q in reference.questions]
    assert [q.gold for q in bench.questions] == [q.gold for q in reference.questions]
    assert [q.meta["split"] for q in bench.questions] == ["train"] * 40 + ["test"] * 60


def test_malformed_record_names_file_and_record(tmp_path, official) -> None:
    recs = [hotpot_hf(r) for r in official[:5]]
    recs[3]["context"]["sentences"] = recs[3]["context"]["sentences"][:-1]  # 10 titles, 9 paragraphs
    path = tmp_path / "dev.parquet"
    datasets.Dataset.from_list(recs).to_parquet(str(path))
    with pytest.raises(
        DataFormatError, match=r"dev\.parquet, record 3 \(id '" + recs[3]["id"] + r"'\)"
    ) as err:
        load_benchmark("hotpotqa", path)
    assert "equal length" in str(err.value)
    # strict=False keeps the other records and counts the bad one
    bench = load_benchmark("hf", path, layout="hotpot_qa", strict=False)
    assert len(bench.questions) == 4 and bench.skipped["malformed"] == 1


def test_corrupt_parquet_and_unknown_layout_are_clear_errors(tmp_path) -> None:
    bad = tmp_path / "train.parquet"
    bad.write_bytes(b"PAR1 not really a parquet file")
    with pytest.raises(DataFormatError, match="train.parquet"):
        load_benchmark("hf", bad)
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"query": "q", "label": 1}) + "\n")
    with pytest.raises(DataFormatError, match=r"odd\.jsonl, record 0: no known layout"):
        load_benchmark("hf", odd)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_benchmark("hf", tmp_path / "missing")


def test_musique_layout_gold_paragraphs_match(tmp_path, official, reference) -> None:
    """HotpotQA dev re-laid-out as MuSiQue: same supporting paragraphs; gold sentences hold the hop answers."""
    recs = []
    for r in official[:20]:
        gold_titles = {t for t, _ in r["supporting_facts"]}
        paras = [
            {"idx": i, "title": t, "paragraph_text": "".join(s), "is_supporting": t in gold_titles}
            for i, (t, s) in enumerate(r["context"])
        ]
        recs.append(
            {
                "id": r["_id"],
                "question": r["question"],
                "answer": r["answer"],
                "answer_aliases": [],
                "paragraphs": paras,
                "answerable": True,
            }
        )
    path = tmp_path / "musique_ans_v1.0_dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert detect_layout(recs[0]) == "musique"
    bench = load_benchmark("hf", path)
    assert bench.name == "musique" and len(bench.questions) == 20
    ref = {q.id: q for q in reference.questions}
    for q in bench.questions:
        titles = {bench.items[i].title for i in q.gold}
        assert titles == {reference.items[i].title for i in ref[q.id].gold}
        assert q.meta["split"] == "test" and len(bench.candidates[q.id]) == len(ref[q.id].gold) + 8
        for item_id, leaves in q.gold.items():
            if leaves:  # located: the gold sentences contain the answer
                text = bench.items[item_id].text.lower()
                assert q.answers[0].lower() in text
    located = sum(bool(leaves) for q in bench.questions for leaves in q.gold.values())
    assert located + bench.skipped["gold_span_not_located"] == sum(len(q.gold) for q in bench.questions)


def test_2wiki_layout_with_json_string_fields(tmp_path, official, reference) -> None:
    recs = [
        {
            "_id": r["_id"],
            "type": r["type"],
            "question": r["question"],
            "answer": r["answer"],
            "context": json.dumps(r["context"]),
            "supporting_facts": json.dumps(r["supporting_facts"]),
            "evidences": "[]",
        }
        for r in official[:10]
    ]
    path = tmp_path / "dev.parquet"
    datasets.Dataset.from_list(recs).to_parquet(str(path))
    bench = load_benchmark("2wikimultihopqa", path)
    ref = [
        (*v[:3], {k.replace("hotpotqa:", "2wikimultihopqa:"): g for k, g in v[3].items()}, v[4])
        for v in view(reference)[:10]
    ]
    assert [v[:5] for v in view(bench)] == ref
    assert all(i.startswith("2wikimultihopqa:") for i in bench.items)


def test_nq_open_layout_has_no_gold_and_says_so(tmp_path) -> None:
    with gzip.open(DATA / "nq" / "nq-open-oracle.jsonl.gz", "rt") as f:
        oracle = [json.loads(next(f)) for _ in range(30)]
    rows = [{"question": r["question"], "answer": r["answers"]} for r in oracle]
    folder = tmp_path / "nq_open"
    datasets.DatasetDict({"validation": datasets.Dataset.from_list(rows)}).save_to_disk(str(folder))
    bench = load_benchmark("nq", folder)
    assert [q.text for q in bench.questions] == [r["question"] for r in oracle]
    assert [q.answers for q in bench.questions] == [r["answers"] for r in oracle]
    assert all(q.gold == {} and q.meta["split"] == "test" for q in bench.questions)
    assert bench.skipped["no_gold_paragraph"] == 30 and not bench.items
    assert len({q.id for q in bench.questions}) == 30
