"""Issue "Reliability" 2 (gold problems are reported, zero usable questions is an error naming the file),
and the data faults that already behaved: missing file, truncated JSON, wrong schema, non-UTF-8.

Tiny hand-made HotpotQA-format files (``*_dev.json``: the test split) run through ``evaluate.py``.
The error cases stop while reading data, before any model loads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evaluate_runner import DEAD_SERVER, metrics, records, run_script

from canopy_lit.data import load_benchmark

CONTEXT = [
    ["Paris", ["Paris is the capital of France.", "It lies on the Seine.", "It has many museums."]],
    ["Lyon", ["Lyon is a city in France.", "It is known for its food."]],
]


def hotpot(qid: str, facts: list | None) -> dict:
    rec = {
        "_id": qid,
        "question": "Which city is the capital of France?",
        "answer": "Paris",
        "context": CONTEXT,
    }
    if facts is not None:
        rec["supporting_facts"] = facts
    return rec


def write(tmp_path: Path, content: str | bytes, name: str = "tiny_dev.json") -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def qa(tmp_path: Path, data: Path, *overrides: str):
    """A QA run that would need no model before the data is read (closed book, dead server)."""
    return run_script(
        "evaluate.py", tmp_path / "run", "method=no_retrieval", "llm=openai", f"llm.base_url={DEAD_SERVER}",
        "data=hotpotqa", f"data.path={data}", "data.split=test", *overrides,
    )  # fmt: skip


def test_skipped_gold_and_records_are_reported_on_stderr_and_in_metrics(tmp_path: Path) -> None:
    recs = [
        hotpot("q1", [["Paris", 0], ["Paris", 7]]),  # sentence 7 is past the paragraph's last sentence
        hotpot("q2", [["Paris", 0], ["Lyon", 0]]),
        {"_id": "q3", "question": "Broken?", "context": "not a list of paragraphs"},  # malformed record
    ]
    data = write(tmp_path, json.dumps(recs))
    run_dir = tmp_path / "run"
    out = run_script(
        "evaluate.py", run_dir, "experiment=probe", "data=hotpotqa", f"data.path={data}", "data.split=test",
        "data.options.strict=false",
    )  # fmt: skip
    assert out.status == 0, out.stderr[-2000:]
    assert f"hotpotqa ({data}): skipped 1 x gold_sentence_out_of_range" in out.stderr
    assert f"hotpotqa ({data}): skipped 1 x malformed" in out.stderr
    m = metrics(run_dir)
    assert m["data/skipped/gold_sentence_out_of_range"] == 1.0 and m["data/skipped/malformed"] == 1.0
    assert f"run dir {run_dir} (" in (run_dir / "evaluate.log").read_text()  # said last, as train.py does
    assert m["probe/n_questions"] == 2.0
    # the per-question counts behind a paired bootstrap: one row per probed question, nothing for skipped ones
    rows = [json.loads(line) for line in (run_dir / "probe_questions.jsonl").read_text().splitlines()]
    assert [r["question"] for r in rows] == ["q1", "q2"] and sum(r["gold_leaves"] for r in rows) > 0
    assert "skipped 1 x gold_sentence_out_of_range" in (run_dir / "evaluate.log").read_text()


def test_file_without_supporting_facts_cannot_be_probed(tmp_path: Path) -> None:
    data = write(tmp_path, json.dumps([hotpot("q1", None), hotpot("q2", None)]))
    out = run_script(
        "evaluate.py", tmp_path / "run", "experiment=probe", "data=hotpotqa", f"data.path={data}"
    )
    assert out.status == 1
    assert f"{data}: no questions with located gold evidence to probe" in out.stderr
    assert "no_gold_annotation: 2" in out.stderr
    assert "skipped 2 x no_gold_annotation" in out.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()  # no NaN probe


def test_empty_data_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    data = write(tmp_path, "")
    out = qa(tmp_path, data)
    assert out.status == 1
    assert (
        f"evaluate.py: error: {data}: no usable questions in split 'test' (0 question(s) read" in out.stderr
    )
    assert records(tmp_path / "run") == [] and not (tmp_path / "run" / "metrics.json").exists()


def test_split_without_questions_is_an_error_naming_the_file(tmp_path: Path) -> None:
    data = write(tmp_path, json.dumps([hotpot("q1", [["Paris", 0]])]), name="tiny_train.json")  # train only
    out = qa(tmp_path, data)
    assert (
        out.status == 1 and f"{data}: no usable questions in split 'test' (1 question(s) read" in out.stderr
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "benchmark file not found: {path}"),
        ('[{"_id": "q1", "question": "Which city', "{path}, record 0: invalid or truncated JSON"),
        (
            json.dumps([{"_id": "q1", "question": "Q?", "context": "oops"}]),
            "{path}, record 0 (id 'q1'): TypeError: field 'context' is a str, expected list or dict",
        ),
        (b'[{"_id": "q1", "question": "caf\xe9?", "context": []}]', "{path}, line 1: not UTF-8 text"),
    ],
    ids=["missing_file", "truncated_json", "wrong_schema", "not_utf8"],
)
def test_unreadable_data_exits_1_naming_file_and_record(
    tmp_path: Path, content: str | bytes | None, message: str
) -> None:
    data = tmp_path / "tiny_dev.json" if content is None else write(tmp_path, content)
    out = qa(tmp_path, data)
    assert out.status == 1
    assert f"evaluate.py: error: {message.format(path=data)}" in out.stderr
    assert "Traceback" not in out.stderr
    assert records(tmp_path / "run") == []


def test_probe_rerun_reads_node_embeddings_from_the_cache_and_applies_the_margin(tmp_path: Path) -> None:
    # A δ sweep reruns the probe per δ: the second run must encode nothing and judge under its own δ.
    data = write(tmp_path, json.dumps([hotpot("q1", [["Paris", 0], ["Lyon", 0]]), hotpot("q2", [["Paris", 1]])]))
    cache = tmp_path / "nodes"
    common = ("experiment=probe", "data=hotpotqa", f"data.path={data}", "data.split=test", f"retrieval.node_cache_dir={cache}")
    first = run_script("evaluate.py", tmp_path / "run0", *common)
    assert first.status == 0, first.stderr[-2000:]
    second = run_script("evaluate.py", tmp_path / "run1", *common, "refine.descend_margin=1.0")
    assert second.status == 0, second.stderr[-2000:]
    m0, m1 = metrics(tmp_path / "run0"), metrics(tmp_path / "run1")
    assert m0["probe/node_cache/misses"] > 0 and any(cache.iterdir())
    assert m1["probe/node_cache/misses"] == 0 and m1["probe/node_cache/disk_hits"] == m0["probe/node_cache/misses"]
    # δ = 1 exceeds any cosine gap between a child and its parent: every item is kept whole
    assert m1["probe/kept_token_ratio"] == 1.0 and m1["probe/pruned_share"] == 0.0 and m1["probe/gold_recall"] == 1.0
    assert m0["probe/pruned_share"] > 0.0
    assert "descend_margin=1" in (tmp_path / "run1" / "table.md").read_text()


DATA = Path(__file__).resolve().parents[2] / "data"


def test_questions_without_a_gold_answer_are_skipped_with_a_reason(tmp_path: Path) -> None:
    """Real HotpotQA dev records, one with an empty and one with no ``answer``: they were
    scored 0 and counted in eval/n; QA skips them as ``no_answer`` (said on stderr and in metrics.json)."""
    recs = json.loads((DATA / "hotpotqa" / "hotpot_dev_distractor_100.json").read_text())[:4]
    recs[1]["answer"] = "  "
    del recs[3]["answer"]
    data = write(tmp_path, json.dumps(recs))
    run_dir = tmp_path / "run"
    out = run_script(
        "evaluate.py", run_dir, "method=no_retrieval", "llm=simulated", f"llm.answer='{recs[0]['answer']}'",
        "data=hotpotqa", f"data.path={data}", "data.split=test",
    )  # fmt: skip
    assert out.status == 0, out.stderr[-2000:]
    assert f"hotpotqa ({data}): skipped 2 x no_answer" in out.stderr
    m = metrics(run_dir)
    assert m["eval/n"] == 2 and m["data/skipped/no_answer"] == 2 and m["eval/em"] == 0.5
    assert [r["id"] for r in records(run_dir)] == [recs[0]["_id"], recs[2]["_id"]]
    # only scoring answers needs them: the reader keeps every question (a probe needs gold evidence only)
    assert len(load_benchmark("hotpotqa", data).questions) == 4


def _tatqa_with_a_repeated_uid(tmp_path: Path) -> tuple[Path, list[dict], str]:
    """The first two real TAT-QA dev documents; the second's first question reuses a uid of the first."""
    docs = json.loads((DATA / "tatqa" / "tatqa_dataset_dev.json").read_text())[:2]
    uid = docs[0]["questions"][0]["uid"]
    docs[1]["questions"][0]["uid"] = uid
    return write(tmp_path, json.dumps(docs), "tatqa_dev.json"), docs, uid


def test_tatqa_duplicate_question_uid_is_skipped_with_a_reason(tmp_path: Path) -> None:
    """QA stopped on "question ids are not unique" (no file, no id); the probe counted the
    question twice. The reader keeps the first record, as HotpotQA does, and says so."""
    data, docs, uid = _tatqa_with_a_repeated_uid(tmp_path)
    total = sum(len(d["questions"]) for d in docs)
    run_dir = tmp_path / "run"
    out = run_script("evaluate.py", run_dir, "method=no_retrieval", "llm=simulated", "data=tatqa",
                     f"data.path={data}", "data.split=all")  # fmt: skip
    assert out.status == 0, out.stderr[-2000:]
    assert f"tatqa ({data}): skipped 1 x duplicate_question" in out.stderr
    m = metrics(run_dir)
    assert m["eval/n"] == total - 1 and m["data/skipped/duplicate_question"] == 1
    bench = load_benchmark("tatqa", data)
    assert len(bench.questions) == total - 1 and bench.skipped["duplicate_question"] == 1
    kept = next(q for q in bench.questions if q.id == uid)
    assert kept.text == docs[0]["questions"][0]["question"]  # the first record of the id stays
    assert bench.candidates[uid][0] == f"tatqa:{docs[0]['table']['uid']}"  # with its own document
    probe_dir = tmp_path / "probe"
    out = run_script("evaluate.py", probe_dir, "experiment=probe", "data=tatqa", f"data.path={data}",
                     "data.split=all")  # fmt: skip
    assert out.status == 0, out.stderr[-2000:]
    rows = [json.loads(x) for x in (probe_dir / "probe_questions.jsonl").read_text().splitlines()]
    assert [r["question"] for r in rows].count(uid) == 1
    assert metrics(probe_dir)["probe/n_questions"] == len(rows) == len({r["question"] for r in rows})
