"""CARVE runs through the shared harness: a failed question is recorded redacted and scores 0, and a
backend that keeps failing stops the run with exit 1, as QA runs do (test_backend_faults.py).

``python evaluate.py method=carve`` over the bundled real clips and triples (real MiniLM, the real CPU
describer with OCR off, the bundled captions, the embedding reranker), the reader an OpenAI-compatible
backend: a loopback server that refuses one question, or a closed loopback port.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from evaluate_runner import DEAD_SERVER, metrics, records, run_script
from loopback import LoopbackServer

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "data" / "fixtures"
KEY = "tok_carvesecret77"  # no "sk-" shape: only the configured-key rule can catch it
REFUSED = "vrb-bikes-taxi"  # the question the server refuses (its text names the roof sign)


@pytest.fixture(scope="module")
def describer_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("describer") / "cache.jsonl"


def carve_run(run_dir: Path, base_url: str, describer_cache: Path, *overrides: str):
    return run_script(
        "evaluate.py", run_dir, "method=carve", f"data.path={FIXTURES / 'vragbench_bundled_clips.jsonl'}",
        "carve/summariser=captions", f"carve.summariser.path={FIXTURES / 'vragbench_bundled_captions.jsonl'}",
        "carve/reranker=embedding", "carve.describer.ocr=false", f"carve.describer.cache_path={describer_cache}",
        "llm=openai", f"llm.base_url={base_url}", "llm.max_retries=0", "llm.multimodal=false", *overrides,
    )  # fmt: skip


def _reply(path: str, body: bytes, headers) -> tuple[int, bytes]:
    if path.endswith("/tokenize"):
        return 200, json.dumps({"count": 5}).encode()
    if "roof sign" in body.decode():  # refused, echoing the credentials it got
        auth = headers.get("Authorization", "")
        message = f"Incorrect API key provided: {auth.removeprefix('Bearer ')}"
        return 401, json.dumps({"error": {"message": message, "header": auth}}).encode()
    completion = {
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "a suit"}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
    }  # fmt: skip
    return 200, json.dumps(completion).encode()


@pytest.fixture
def refusing_server() -> Iterator[str]:
    server = LoopbackServer(_reply)
    yield f"{server.root}/v1"
    server.close()


def test_a_failed_question_is_recorded_redacted_and_scores_zero(
    tmp_path: Path, refusing_server: str, describer_cache: Path, monkeypatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    run_dir = tmp_path / "run"
    out = carve_run(run_dir, refusing_server, describer_cache, "limit=3")
    assert out.status == 0, out.stderr
    recs = {r["id"]: r for r in records(run_dir)}
    assert len(recs) == 3 and [r["status"] for r in recs.values()].count("failed") == 1
    failed = recs[REFUSED]
    assert failed["status"] == "failed" and failed["method"] == "carve" and failed["backend_failure"]
    assert "HTTP 401" in failed["error"] and "***" in failed["error"]
    assert failed["scores"] == {"em": 0.0, "f1": 0.0, "match": 0.0}  # 0 on every score, not left out
    suit = recs["vrb-bikes-suit"]
    assert suit["status"] == "ok" and suit["prediction"] == "a suit" and suit["scores"]["em"] == 1.0
    for text in ((run_dir / "predictions.jsonl").read_text(), (run_dir / "evaluate.log").read_text(),
                 out.stderr, out.stdout):  # fmt: skip
        assert KEY not in text
    m = metrics(run_dir)
    assert m["eval/n"] == 3 and m["eval/failed"] == 1
    assert m["eval/em"] == pytest.approx(sum(r["scores"]["em"] for r in recs.values()) / 3)  # the failed one counts 0
    ok = [r for r in recs.values() if r["status"] == "ok"]
    assert m["carve/retrieval_recall@1"] == pytest.approx(sum(r["stage"]["recall@1"] for r in ok) / 3)


def test_a_dead_backend_stops_the_run_after_n_consecutive_failures(
    tmp_path: Path, describer_cache: Path
) -> None:
    run_dir = tmp_path / "run"
    out = carve_run(run_dir, DEAD_SERVER, describer_cache, "limit=5", "max_consecutive_failures=2")
    assert out.status == 1
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("evaluate.py: error:")]
    assert "stopped after 2 consecutive backend failures" in line and "2 of 5 questions failed, 3 not run" in line
    recs = records(run_dir)
    assert len(recs) == 2 and all(r["status"] == "failed" and r["backend_failure"] for r in recs)
    m = metrics(run_dir)  # the metrics of what ran are written before the run stops
    assert m["eval/n"] == 2 and m["eval/failed"] == 2 and m["eval/not_run"] == 3
    assert m["eval/em"] == 0.0 and m["carve/retrieval_recall@1"] == 0.0
