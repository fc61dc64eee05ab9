"""Issue "Reliability" 7 (a dead LLM backend stops the run with exit 1, records resumable) and
11 (an API key echoed by a server never reaches predictions.jsonl or evaluate.log).

The dead server is a closed loopback port; the echoing server is a real HTTP server on loopback.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from evaluate_runner import DEAD_SERVER, metrics, records, run_script

from canopy_lit.eval.harness import RunFailed, run_questions
from canopy_lit.llm.base import LLMError, redact, register_secret
from canopy_lit.pipeline.trace import QuestionRecord
from canopy_lit.types import Question


def closed_book(run_dir: Path, base_url: str, *overrides: str):
    return run_script(
        "evaluate.py", run_dir, "method=no_retrieval", "llm=openai", f"llm.base_url={base_url}",
        "llm.max_retries=0", "data=hotpotqa", "data.split=test", *overrides,
    )  # fmt: skip


def test_dead_server_stops_after_n_consecutive_failures_and_exits_1(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = closed_book(run_dir, DEAD_SERVER, "limit=8", "max_consecutive_failures=3")
    assert out.status == 1
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("evaluate.py: error:")]
    assert "stopped after 3 consecutive backend failures" in line
    assert "failed after 1 attempt(s): ConnectError" in line
    assert "3 of 8 questions failed, 5 not run" in line and "retry_failed=true" in line
    recs = records(run_dir)
    assert len(recs) == 3 and all(r["status"] == "failed" and r["backend_failure"] for r in recs)
    m = metrics(run_dir)
    assert m["eval/n"] == 3 and m["eval/failed"] == 3 and m["eval/not_run"] == 5


def test_every_question_failing_exits_1_even_below_the_streak(tmp_path: Path) -> None:
    out = closed_book(tmp_path / "run", DEAD_SERVER, "limit=2")
    assert out.status == 1
    assert "evaluate.py: error: all 2 questions failed (last: LLMError: openai backend" in out.stderr
    assert metrics(tmp_path / "run")["eval/failed"] == 2


def questions(n: int) -> list[Question]:
    return [Question(f"q{i}", f"What is {i}?", [str(i)], "unit") for i in range(n)]


def test_records_of_a_stopped_run_resume_once_the_backend_is_back(tmp_path: Path) -> None:
    server_up = False

    def answer(q: Question) -> QuestionRecord:
        if not server_up and q.id != "q0":
            raise LLMError("openai backend: POST http://127.0.0.1:9/v1/chat/completions failed: ConnectError")
        return QuestionRecord(q.id, q.text, q.answers, q.benchmark, prediction=q.answers[0])

    with pytest.raises(RunFailed, match="stopped after 2 consecutive backend failures") as info:
        run_questions(questions(6), answer, tmp_path, progress=False, max_consecutive_failures=2)
    assert info.value.not_run == 3 and len(info.value.records) == 3
    server_up = True
    recs = run_questions(questions(6), answer, tmp_path, progress=False, retry_failed=True)
    assert [r["status"] for r in recs] == ["ok"] * 6
    ids = [json.loads(x)["id"] for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert sorted(ids) == [f"q{i}" for i in range(6)]  # each question once


def test_failures_that_are_not_the_backend_do_not_stop_the_run(tmp_path: Path) -> None:
    def answer(q: Question) -> QuestionRecord:
        if q.id != "q5":
            raise FileNotFoundError(f"image of {q.id} is missing")  # per-question data fault
        return QuestionRecord(q.id, q.text, q.answers, q.benchmark, prediction="5")

    recs = run_questions(questions(6), answer, tmp_path, progress=False, max_consecutive_failures=2)
    assert [r["status"] for r in recs].count("failed") == 5


class _EchoKeyHandler(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that rejects every request, echoing the credentials it got."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        auth = self.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ")
        body = json.dumps(
            {"error": {"message": f"Incorrect API key provided: {key}", "header": auth}}
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echo_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoKeyHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_api_key_echoed_by_the_server_is_redacted_everywhere(
    tmp_path: Path, echo_server: str, monkeypatch
) -> None:
    key = "tok_customsecret42"  # no "sk-" shape: only the configured-key rule can catch it
    monkeypatch.setenv("OPENAI_API_KEY", key)
    run_dir = tmp_path / "run"
    out = closed_book(run_dir, echo_server, "limit=2")
    assert out.status == 1
    recs = records(run_dir)
    assert len(recs) == 2 and all("HTTP 401" in r["error"] and "***" in r["error"] for r in recs)
    for text in ((run_dir / "predictions.jsonl").read_text(), (run_dir / "evaluate.log").read_text(),
                 out.stderr, out.stdout):  # fmt: skip
        assert key not in text


def test_redact_hides_registered_keys_and_credential_shapes() -> None:
    register_secret("plain-secret-value")
    text = redact(
        'bad key plain-secret-value; Authorization: Bearer abc.DEF_123; key sk-proj-A1b2C3d4E5f6; "api_key": "zz9"'
    )
    assert text == 'bad key ***; Authorization: Bearer ***; key ***; "api_key": "***"'
    assert (
        redact("ConnectError: [Errno 111] Connection refused")
        == "ConnectError: [Errno 111] Connection refused"
    )
