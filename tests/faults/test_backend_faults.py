"""Issue "Reliability" 7 (a dead LLM backend stops the run with exit 1, records resumable) and
11 (an API key echoed by a server never reaches predictions.jsonl or evaluate.log); issue "Runs that
never lie" 6 (credentials in ``llm.base_url``) and 10 (a 200 that is not JSON; prompts too long).

The dead server is a closed loopback port; the other servers are real HTTP servers on loopback.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from evaluate_runner import DEAD_SERVER, metrics, records, run_script
from loopback import LoopbackServer

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


# ----------------------------------------------------------------------------- issue "Runs that never lie"

COMPLETION = {
    "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Paris"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}  # fmt: skip


class Scripted(LoopbackServer):
    """Answers each POST with the next ``(status, body bytes)`` of ``replies`` (the last one repeats)."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, bytes]] = []
        super().__init__(lambda path, body, headers: self.replies.pop(0) if len(self.replies) > 1 else self.replies[0])


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    server = Scripted()
    yield server
    server.close()


def test_credentials_in_the_base_url_are_redacted_everywhere(tmp_path: Path, monkeypatch) -> None:
    """``user:password@`` in ``llm.base_url`` is sent as a Basic header, which the server echoes."""

    def echo(path: str, body: bytes, headers) -> tuple[int, bytes]:
        auth = headers.get("Authorization", "")
        creds = base64.b64decode(auth.removeprefix("Basic ")).decode() if auth.startswith("Basic ") else ""
        message = f"Invalid credentials {creds} (header {auth})"
        return 401, json.dumps({"error": {"message": message, "header": auth}}).encode()

    server = LoopbackServer(echo)
    password = "pw-s3cret-77"
    basic = base64.b64encode(f"alice:{password}".encode()).decode()
    try:
        # from the environment (the config's ${oc.env:OPENAI_BASE_URL}), as a user keeps it out of files
        monkeypatch.setenv("OPENAI_BASE_URL", server.root.replace("http://", f"http://alice:{password}@") + "/v1")
        env_dir = tmp_path / "env"
        out = run_script("evaluate.py", env_dir, "method=no_retrieval", "llm=openai", "llm.max_retries=0",
                         "data=hotpotqa", "data.split=test", "limit=2")  # fmt: skip
        assert out.status == 1
        recs = records(env_dir)
        assert len(recs) == 2 and all("HTTP 401" in r["error"] and "alice:***@" not in r["error"] for r in recs)
        assert all("http://***@127.0.0.1" in r["error"] and "Basic ***" in r["error"] for r in recs)
        texts = [p.read_text() for p in env_dir.rglob("*") if p.is_file()] + [out.stderr, out.stdout]
        for text in texts:  # every file of the run folder (records, log, run.json, .hydra), stderr, stdout
            assert password not in text and basic not in text
        # typed on the command line: what the run itself writes is redacted (overrides.yaml keeps the
        # command line as typed, like a shell history)
        arg_dir = tmp_path / "arg"
        url = server.root.replace("http://", f"http://alice:{password}@") + "/v1"
        out = closed_book(arg_dir, url, "limit=2")
        assert out.status == 1
        for text in ((arg_dir / "predictions.jsonl").read_text(), (arg_dir / "evaluate.log").read_text(),
                     out.stderr, out.stdout):  # fmt: skip
            assert password not in text and basic not in text
    finally:
        server.close()


def test_redact_hides_url_userinfo_and_authorization_headers() -> None:
    basic = base64.b64encode(b"bob:hunter22").decode()
    text = redact(
        f"POST https://bob:hunter22@api.example.org/v1 failed; Authorization: Basic {basic}; "
        f"echo {{'authorization': 'Digest abc123'}}; header Basic {basic}; token url https://tok9876@h/x"
    )
    assert "hunter22" not in text and basic not in text and "abc123" not in text and "tok9876" not in text
    assert text.startswith("POST https://***@api.example.org/v1 failed; Authorization: Basic ***;")
    assert redact("a basic idea with Basic auth, see https://example.org/a@b") == (
        "a basic idea with Basic auth, see https://example.org/a@b"
    )


def test_a_200_that_is_not_json_is_a_backend_failure_naming_backend_and_url(tmp_path: Path, scripted) -> None:
    """A proxy's HTML page with status 200 counts toward ``max_consecutive_failures``."""
    scripted.replies.append((200, b"<html><body>Gateway says hello</body></html>"))
    run_dir = tmp_path / "run"
    out = closed_book(run_dir, f"{scripted.root}/v1", "limit=4", "max_consecutive_failures=2")
    assert out.status == 1
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("evaluate.py: error:")]
    assert "stopped after 2 consecutive backend failures" in line and "2 not run" in line
    assert f"openai backend: POST {scripted.root}/v1/chat/completions: the server answered with a body that is not JSON" in line
    recs = records(run_dir)
    assert len(recs) == 2 and all(r["backend_failure"] and "Gateway says hello" in r["error"] for r in recs)


def test_prompts_too_long_fail_their_questions_without_stopping_a_healthy_backend(
    tmp_path: Path, scripted
) -> None:
    """A context overflow is the caller's error; the questions after it still run."""
    too_long = {"error": {"message": "This model's maximum context length is 2048 tokens. However, you "
                                     "requested 9000 tokens (8990 in the messages, 10 in the completion).",
                          "type": "BadRequestError", "code": 400}}  # fmt: skip
    scripted.replies.extend([(400, json.dumps(too_long).encode())] * 2 + [(200, json.dumps(COMPLETION).encode())])
    run_dir = tmp_path / "run"
    out = closed_book(run_dir, f"{scripted.root}/v1", "limit=3", "max_consecutive_failures=2")
    assert out.status == 0, out.stderr
    recs = records(run_dir)
    assert [r["status"] for r in recs] == ["failed", "failed", "ok"]
    assert all(r["error"].startswith("PromptTooLongError: openai backend") and not r["backend_failure"] for r in recs[:2])
    m = metrics(run_dir)
    assert m["eval/n"] == 3 and m["eval/failed"] == 2 and "eval/not_run" not in m
