"""Secrets never leave the process (issue 44 item 16).

A password in ``llm.base_url`` (typed on the command line or in ``OPENAI_BASE_URL``) goes to the server as a
Basic header. Before: a 200 reply echoing that header stored the Basic token in predictions.jsonl (and so
the W&B table and the viewer); the password itself went to ``wandb/offline-run-*/run-*.wandb`` and
``logs/debug.log`` (the resolved config and the command line of ``wandb.init``) and, typed on the command
line, to ``.hydra/*.yaml`` and the W&B run name. Each test runs the real script in a subprocess and reads
every file written under the run folder (the W&B offline folder included) for the secret.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from evaluate_runner import ROOT, records, script_cmd
from loopback import LoopbackServer
from wandb_offline import no_key_env

from canopy_lit.redaction import redact, redact_config, redact_saved_configs, redacted_argv

pytest.importorskip("wandb")

USER, PASSWORD = "alice", "pw-s3cret-77"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def leaks(folder: Path, *texts: str) -> list[str]:
    """Every file under ``folder`` (and each of ``texts``) that holds the password or its Basic token."""
    found = [str(p) for p in sorted(folder.rglob("*")) if p.is_file()
             and (PASSWORD.encode() in p.read_bytes() or BASIC.encode() in p.read_bytes())]  # fmt: skip
    return found + [f"text {i}" for i, t in enumerate(texts) if PASSWORD in t or BASIC in t]


def echo(path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
    """A healthy server whose answer echoes the Authorization header it got."""
    if path.endswith("/tokenize"):
        return 200, json.dumps({"count": max(1, len(body) // 4)}).encode()
    content = f"Paris (request had Authorization: {headers.get('Authorization', '')})"
    return 200, json.dumps({
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }).encode()  # fmt: skip


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    s = LoopbackServer(echo)
    yield s
    s.close()


@pytest.mark.parametrize("where", ["command line", pytest.param("OPENAI_BASE_URL", marks=pytest.mark.slow)])
def test_a_password_in_the_base_url_is_in_no_file_an_evaluation_writes(
    tmp_path: Path, server: LoopbackServer, where: str
) -> None:
    url = server.root.replace("http://", f"http://{USER}:{PASSWORD}@") + "/v1"
    env = no_key_env(tmp_path)
    overrides = ["method=no_retrieval", "llm=openai", "llm.max_retries=0", "data=hotpotqa", "data.split=test",
                 "limit=2", "logger=wandb", "threads=1"]  # fmt: skip
    if where == "command line":
        overrides.append(f"llm.base_url={url}")
    else:
        env["OPENAI_BASE_URL"] = url
    run_dir = tmp_path / "run"
    out = subprocess.run(script_cmd("evaluate.py", run_dir, *overrides), env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    recs = records(run_dir)
    # the answer carries the echo (the reader keeps its text up to the redacted token)
    assert len(recs) == 2 and all(r["status"] == "ok" and "Authorization: Basic" in r["prediction"] for r in recs)
    assert list(run_dir.glob("wandb/offline-run-*/run-*.wandb")), "no W&B offline run was written"
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert leaks(run_dir, out.stdout, out.stderr) == []
    if where == "command line":  # the run name and saved overrides keep the rest of the URL
        assert "llm.base_url=http://***@127.0.0.1" in (run_dir / ".hydra" / "overrides.yaml").read_text()


@pytest.mark.slow
def test_a_password_on_a_training_command_line_is_in_no_file_the_run_writes(tmp_path: Path) -> None:
    """train.py saves .hydra/ itself (Hydra) and starts its W&B run through Lightning's WandbLogger; the
    run name is made of the command line (``logger.wandb.name``: task/override_dirname)."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", "debug=fdr", "logger=wandb",
           "threads=1", f"+logger.wandb.notes=data mirror http://{USER}:{PASSWORD}@127.0.0.1:9/v1"]  # fmt: skip
    out = subprocess.run(cmd, env=no_key_env(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert list(run_dir.glob("wandb/offline-run-*/run-*.wandb")) and (run_dir / "adapter").is_dir()
    assert "http://***@127.0.0.1:9/v1" in (run_dir / ".hydra" / "config.yaml").read_text()
    assert leaks(run_dir, out.stdout, out.stderr) == []


def test_redact_config_redacts_every_string_of_nested_config_data() -> None:
    pw = "zq-Uniq-pass-1"
    basic = base64.b64encode(f"bob:{pw}".encode()).decode()
    config = {"llm": {"base_url": f"https://bob:{pw}@api.example.org/v1", "timeout": 60.0},
              "names": [f"x/llm.base_url=https://bob:{pw}@h/v1", 3, None], "ok": "plain text"}  # fmt: skip
    clean = redact_config(config)
    assert clean == {"llm": {"base_url": "https://***@api.example.org/v1", "timeout": 60.0},
                     "names": ["x/llm.base_url=https://***@h/v1", 3, None], "ok": "plain text"}  # fmt: skip
    # the URL's credentials are registered on the way: an echo of the bare password or Basic token goes too
    assert redact(f"echo {pw} and {basic}") == "echo *** and ***"


def test_redact_saved_configs_and_redacted_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hydra = tmp_path / ".hydra"
    hydra.mkdir()
    (hydra / "overrides.yaml").write_text("- llm.base_url=http://carol:Pw-9981x@h:1/v1\n- limit=2\n")
    (hydra / "config.yaml").write_text("limit: 2\n")
    assert redact_saved_configs(hydra) == [hydra / "overrides.yaml"]
    assert (hydra / "overrides.yaml").read_text() == "- llm.base_url=http://***@h:1/v1\n- limit=2\n"
    argv = ["evaluate.py", "llm.base_url=http://carol:Pw-9981x@h:1/v1"]
    monkeypatch.setattr(sys, "argv", argv)
    with redacted_argv():
        assert sys.argv == ["evaluate.py", "llm.base_url=http://***@h:1/v1"]
    assert sys.argv is argv
