"""Your own corpus end to end: a corpus file of a few hundred real bundled items, indexed by the command (MiniLM),
then evidence mode, QA with SmolLM2 and retrieval evaluation retrieving from it (``retriever=corpus
retrieval.corpus=PATH``).

The file holds the HotpotQA test questions 0-2's delivered paragraphs, leaves out question 3's gold paragraphs,
and adds other HotpotQA paragraphs and TAT-QA tables and paragraphs, written as the how-to documents the format.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# slow tier (-m slow, run by .ci/run after the default tier): builds every index kind over a real corpus, ~65 s for the module
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
N_ITEMS = 300


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def record(item) -> dict:
    """An item as the documented corpus record (not ``Item.to_dict``: the hand-written shape)."""
    rec: dict = {"id": item.id, "title": item.title}
    if item.sentences:
        rec["sentences"] = item.sentences
    elif item.table is not None:
        rec["table"] = {"header": item.table.header, "rows": item.table.rows}
        rec["modality"] = "table"
    else:
        rec["text"] = item.text
    return rec


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    from canopy_lit.data import load_benchmark, split_questions

    hp = load_benchmark("hotpotqa")
    questions = split_questions(hp, "test")[:4]
    absent = set(questions[3].gold)  # question 3's gold paragraphs are not in the corpus
    ids = [i for q in questions[:3] for i in hp.candidates[q.id]]
    ids += [i for i in hp.items if i not in absent and i not in hp.candidates[questions[3].id]]
    ids = [i for i in dict.fromkeys(ids) if i not in absent][: N_ITEMS - 40]
    tat = load_benchmark("tatqa")
    items = [hp.items[i] for i in ids] + list(tat.items.values())[:40]
    folder = tmp_path_factory.mktemp("own")
    path = folder / "my_corpus.jsonl"
    path.write_text("".join(json.dumps(record(it)) + "\n" for it in items), encoding="utf-8")
    assert all(g in ids for q in questions[:3] for g in q.gold) and not absent & set(ids)
    return {"path": path, "ids": {it.id for it in items}, "n": len(items), "cache": folder / "cache",
            "questions": questions, "folder": folder}  # fmt: skip


def index_cmd(corpus: dict) -> list[str]:
    return [sys.executable, "-m", "canopy_lit.retrieval", "index", "--corpus", str(corpus["path"]),
            "--cache-dir", str(corpus["cache"]), "--index", "flat_sq_fp16", "flat", "ivfpq", "--bm25",
            "--threads", "1", "--batch-size", "32"]  # fmt: skip


@pytest.fixture(scope="module")
def built(corpus) -> dict:
    res = subprocess.run(index_cmd(corpus), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return {"stdout": res.stdout, "stderr": res.stderr}


@pytest.fixture(scope="module")
def smollm2() -> str:
    from canopy_lit.assets import AssetError, resolve

    try:
        return str(resolve("smollm2-135m"))
    except AssetError as err:  # CI fetches it in set-up; a bare checkout may not have it
        pytest.skip(f"smollm2-135m asset unavailable: {err}")


def snapshot(cache: Path) -> dict[str, int]:
    """Every file of the index cache with its modification time: a run that rebuilt anything changes it."""
    return {str(p.relative_to(cache)): p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}


def evaluate(run_dir: Path, corpus: dict, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "evaluate.py"), f"hydra.run.dir={run_dir}", "progress=false", "threads=1",
           "retriever=corpus", f"retrieval.corpus={corpus['path']}", f"retrieval.cache_dir={corpus['cache']}",
           f"retrieval.node_cache_dir={corpus['folder'] / 'nodes'}", *overrides]  # fmt: skip
    before = snapshot(corpus["cache"])
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert snapshot(corpus["cache"]) == before  # the run used what the command built, and changed nothing
    settings = json.loads((run_dir / "settings.json").read_text())["settings"]
    assert settings["retriever._target_"].endswith("corpus_retriever")
    assert settings["retrieval.corpus"] == str(corpus["path"])
    return res


def test_the_command_builds_every_index_kind_and_bm25_then_resumes(corpus, built) -> None:
    out = built["stdout"]
    assert f"{corpus['n']} items" in out and "encoded" in built["stderr"]
    for kind in ("flat_sq_fp16", "flat", "ivfpq"):
        assert f"(index={kind}," in out
    assert f"BM25 over {corpus['n']} items" in out and "retrieval.corpus=" in out
    cache = corpus["cache"]
    assert len(list(cache.glob("corpus-*.jsonl"))) == 1 and len(list(cache.glob("emb-*"))) == 1
    assert len(list(cache.glob("index-*"))) == 3 and len(list(cache.glob("bm25-*"))) == 1
    # the same command again: everything is found, nothing is encoded or indexed anew
    before = snapshot(cache)
    again = subprocess.run(index_cmd(corpus), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "encoded" not in again.stderr and "bm25: indexed" not in again.stderr
    assert snapshot(cache) == before


def test_evidence_mode_retrieves_from_the_own_corpus(tmp_path, corpus, built, smollm2) -> None:
    evaluate(tmp_path / "run", corpus, "experiment=evidence", "data=hotpotqa", "limit=2", "llm=llamacpp_smollm2")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["evidence/n"] == 2 and metrics["evidence/failed"] == 0
    assert metrics["evidence/item_recall"] > 0  # both questions' gold paragraphs are in the corpus
    recs = lines(tmp_path / "run" / "predictions.jsonl")
    for r in recs:
        retrieved = r["rounds"][0]["retrieved"]
        assert len(retrieved) == 5 and set(retrieved) <= corpus["ids"]


def test_qa_with_smollm2_retrieves_from_the_own_corpus(tmp_path, corpus, built, smollm2) -> None:
    evaluate(tmp_path / "run", corpus, "data=hotpotqa", "limit=2", "llm=llamacpp_smollm2", "loop.max_rounds=1",
             "retrieval.k=3")  # fmt: skip
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["eval/n"] == 2 and metrics["eval/failed"] == 0
    recs = lines(tmp_path / "run" / "predictions.jsonl")
    assert {r["id"] for r in recs} == {q.id for q in corpus["questions"][:2]}
    for r in recs:
        assert r["status"] != "failed" and isinstance(r["prediction"], str)
        assert all(set(rd["retrieved"]) <= corpus["ids"] and len(rd["retrieved"]) == 3 for rd in r["rounds"])


def test_retrieval_evaluation_counts_gold_items_the_corpus_lacks_as_misses(tmp_path, corpus, built) -> None:
    evaluate(tmp_path / "run", corpus, "experiment=retrieval", "retrieval=bm25",
                   "retrieval_eval.benchmarks=[hotpotqa]", "retrieval_eval.split=test", "limit=4")  # fmt: skip
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["retrieval/corpus_size"] == corpus["n"]
    assert m["retrieval/hotpotqa/questions"] == 4 and m["retrieval/hotpotqa/gold_absent"] == 1
    assert 0 < m["retrieval/hotpotqa/recall@20"] <= 0.75  # question 3 can never hit
    assert "1 of 4 questions have no gold item in corpus" in (tmp_path / "run" / "evaluate.log").read_text()
