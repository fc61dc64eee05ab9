"""Resumable evaluation over a question list: one durable record per question, metrics, table.

Failures are data: a question whose pipeline raises (an LLM that keeps failing, a
missing file) is recorded with ``status: failed`` and the error (secrets redacted), and the
run goes on, unless ``max_consecutive_failures`` backend failures come in a row or every
question failed: then ``RunFailed`` stops it (the records written stay, for a resume).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from canopy_lit.eval.records import RecordLog
from canopy_lit.eval.summary import score_record, summarize
from canopy_lit.io import atomic_write_text, naming
from canopy_lit.llm.base import LLMError, redact
from canopy_lit.pipeline.trace import QuestionRecord
from canopy_lit.types import Question

log = logging.getLogger(__name__)

# The ids of the questions the latest run of a folder was asked, in order: predictions.jsonl also
# keeps the records of earlier runs into the folder (another ``limit``), which are not this run's.
QUESTION_IDS = "question_ids.json"

# One question through a pipeline: its record (the evidence loop's QuestionRecord, or a plain dict from a
# runner with records of its own shape, e.g. CARVE's).
AnswerFn = Callable[[Question], QuestionRecord | dict[str, Any]]


class RunFailed(RuntimeError):
    """The run stopped because its backend keeps failing (or every question failed).

    Attributes:
        records: the records of the run's questions written so far (failed ones included).
        not_run: questions never attempted.
    """

    def __init__(self, message: str, records: list[dict[str, Any]], not_run: int) -> None:
        super().__init__(message)
        self.records = records
        self.not_run = not_run


def notify(message: str, level: int = logging.WARNING) -> None:
    """A line for the user on stderr, also written to the run's log file (not again to the console)."""
    print(message, file=sys.stderr, flush=True)
    record = log.makeRecord(log.name, level, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and record.levelno >= handler.level:
            handler.handle(record)


class RunLogHandler(logging.FileHandler):
    """The run folder's log file: the evaluate config's ``hydra.job_logging.handlers.file``.

    Records wait in memory until ``start_run_log()``, called once the run folder is locked and its
    inputs checked, so that a refused run (folder in use, other settings, a garbled predictions.jsonl)
    adds nothing to the folder; the waiting records are written then. A write that fails (a full disk)
    is said once on stderr, naming the file, and ends the log instead of a traceback per record.
    """

    def __init__(
        self, filename: str, mode: str = "a", encoding: str | None = None, delay: bool = True, errors: str | None = None
    ) -> None:
        super().__init__(filename, mode, encoding, delay=True, errors=errors)  # opened at the first write
        self.waiting: list[logging.LogRecord] | None = []
        self.broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.waiting is not None:
            self.waiting.append(record)
        elif not self.broken:
            try:
                super().emit(record)  # the file's open is outside FileHandler's own error handling
            except Exception:
                self.handleError(record)

    def start(self) -> None:
        waiting, self.waiting = self.waiting or [], None
        try:
            self.stream = self.stream or self._open()  # the file exists from the start, as it always did
        except OSError as err:
            self._stop(err)
        for record in waiting:
            self.handle(record)

    def handleError(self, record: logging.LogRecord) -> None:
        self._stop(sys.exc_info()[1])

    def _stop(self, err: BaseException | None) -> None:
        if self.broken:
            return
        self.broken = True
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        print(f"{Path(sys.argv[0]).name}: warning: {self.baseFilename}: {reason}; the rest of this run is not logged there",
              file=sys.stderr, flush=True)  # fmt: skip


def start_run_log() -> None:
    """Let the run's log file (``RunLogHandler``) write, the records so far first."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, RunLogHandler):
            handler.start()


_FULL = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def unwritable_message(err: OSError, run_dir: str | Path | None = None) -> str | None:
    """One line for an ``OSError`` of a full disk or a place that cannot be written, naming the file and
    the remedy (None for any other error). ``run_dir``: the run folder, the place ``hydra.run.dir`` can
    move (None: ``err`` is about the run folder itself)."""
    if err.errno not in (*_FULL, *_NOT_WRITABLE):
        return None
    line = f"{err.filename}: " if err.filename else ""
    line += err.strerror or os.strerror(err.errno or 0)
    if err.errno in _FULL:
        return f"{line}; free space and rerun the same command to resume (finished questions are kept)"
    in_run_dir = run_dir is None or (err.filename is not None and Path(err.filename).is_relative_to(run_dir))
    return f"{line}; use a writable hydra.run.dir" if in_run_dir else line


class RunFolderCheck(Callback):
    """Hydra callback: make the run (or sweep) folder before Hydra does, so that an unwritable place is one
    line on stderr naming it, exit 1, rather than a traceback from Hydra's ``mkdir``."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._make(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._make(config.hydra.sweep.dir)

    @staticmethod
    def _make(folder: str) -> None:
        try:
            Path(str(folder)).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            line = unwritable_message(err)
            if line is None:
                raise
            print(f"{Path(sys.argv[0]).name}: error: {line}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None


def failed_record(q: Question, err: BaseException) -> dict[str, Any]:
    """A failed question scores 0 on its benchmark's metrics (so they exist even if every question failed)."""
    error = redact(f"{type(err).__name__}: {err}")
    rec = QuestionRecord(q.id, q.text, list(q.answers), q.benchmark, status="failed", error=error)
    rec.scores = dict.fromkeys(score_record({}, len(q.choices) if q.choices else None), 0.0)
    out = rec.to_dict()
    out["backend_failure"] = isinstance(err, LLMError)
    return out


def run_questions(
    questions: Sequence[Question],
    answer: AnswerFn,
    out_dir: str | Path,
    *,
    concurrency: int = 1,
    retry_failed: bool = False,
    progress: bool = True,
    console: Console | None = None,
    score: Callable[[dict[str, Any], Question], dict[str, float]] | None = None,
    max_consecutive_failures: int = 5,
    fields: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Answer every question not yet in ``out_dir/predictions.jsonl``; return the records of ``questions``.

    Args:
        questions: the evaluation set (ids must be unique).
        answer: runs the pipeline on one question.
        out_dir: run folder; ``predictions.jsonl`` is appended and fsynced per question.
        concurrency: questions in flight at once (>1 only for server LLM backends).
        retry_failed: run again the questions recorded as failed.
        score: ``(record, question) -> scores`` (default: EM / F1 or accuracy of the prediction).
        max_consecutive_failures: stop submitting after this many backend failures (``LLMError``)
            in a row (0 = never); questions in flight still finish and are recorded.
        fields: keys every record of the run carries, failed ones included (CARVE: its ``method``).

    Raises:
        RunFailed: after such a stop, or when every question of the run is recorded as failed.
            Failed questions stay recorded; a rerun with ``retry_failed=True`` runs them again.
    """
    ids = [q.id for q in questions]
    repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
    if repeated:
        raise ValueError(f"question ids are not unique ({', '.join(map(repr, repeated[:5]))}); cannot resume by id")
    logbook = RecordLog(Path(out_dir) / "predictions.jsonl", retry_failed=retry_failed)
    if logbook.repaired_bytes:
        log.warning("cut %d bytes of a torn last record from %s", logbook.repaired_bytes, logbook.path)
    todo = [q for q in questions if q.id not in logbook]
    lock = threading.Lock()
    running = {"em": 0.0, "f1": 0.0, "acc": 0.0, "tok": 0.0, "n": 0}

    def one(q: Question) -> dict[str, Any]:
        try:
            out = answer(q)
            rec = out if isinstance(out, dict) else out.to_dict()
            rec["scores"] = score(rec, q) if score else score_record(rec, len(q.choices) if q.choices else None)
        except Exception as err:  # a failed question is recorded, never fatal for the run
            rec = failed_record(q, err)
            log.warning("question %s failed: %s", q.id, rec["error"])
        return {**rec, **fields} if fields else rec

    streak: list[dict[str, Any]] = []  # the current run of consecutive backend failures

    def stop() -> bool:
        return 0 < max_consecutive_failures <= len(streak)

    cols = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[stats]}"),
    )
    with Progress(*cols, console=console, disable=not progress) as bar, logbook:
        task = bar.add_task("questions", total=len(questions), completed=len(questions) - len(todo), stats="")

        def done(rec: dict[str, Any]) -> None:
            with lock:
                logbook.append(rec)
                streak[:] = [*streak, rec] if rec.get("backend_failure") else []
                s = rec.get("scores") or {}
                running["n"] += 1
                for key, name in (("em", "em"), ("f1", "f1"), ("acc", "accuracy"), ("ans", "answer_recall")):
                    running[key] = running.get(key, 0.0) + s.get(name, 0.0)
                running["tok"] += rec.get("evidence_tokens", 0)
                n = running["n"]
                stats = (
                    ""  # nothing scored (CARVE's retrieval stage alone)
                    if not s
                    else f"acc {running['acc'] / n:.3f} "
                    if "accuracy" in s
                    else f"answer recall {running['ans'] / n:.3f} "  # evidence runs (no prediction)
                    if score is not None
                    else f"EM {running['em'] / n:.3f} F1 {running['f1'] / n:.3f} "
                ) + f"tok {running['tok'] / n:.0f}"
                bar.update(task, advance=1, stats=stats)

        attempted = 0
        if concurrency <= 1:
            for q in todo:
                if stop():
                    break
                attempted += 1
                done(one(q))
        else:
            with ThreadPoolExecutor(concurrency) as pool:
                pending: set[Future] = set()
                queue = list(reversed(todo))
                while (queue and not stop()) or pending:
                    while queue and len(pending) < concurrency and not stop():  # bounded in-flight work
                        attempted += 1
                        pending.add(pool.submit(one, queue.pop()))
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        done(fut.result())
        # In the questions' order, not the file's: a resumed, re-answered or concurrent run appends in another
        # order, and the bootstrap intervals over these records resample by position.
        position = {qid: i for i, qid in enumerate(ids)}
        records = sorted((r for r in logbook.records() if r["id"] in position), key=lambda r: position[r["id"]])
    with naming(Path(out_dir) / QUESTION_IDS):
        atomic_write_text(Path(out_dir) / QUESTION_IDS, json.dumps(ids) + "\n")
    failed = sum(r.get("status") == "failed" for r in records)
    advice = "rerun the same command with retry_failed=true to run the failed questions again"
    if stop():
        raise RunFailed(
            f"stopped after {len(streak)} consecutive backend failures (last: {streak[-1]['error']}); "
            f"{failed} of {len(questions)} questions failed, {len(todo) - attempted} not run; {advice}",
            records,
            len(todo) - attempted,
        )
    if records and failed == len(records):
        last = records[-1].get("error")
        raise RunFailed(f"all {failed} questions failed (last: {last}); {advice}", records, 0)
    return records


def read_question_ids(run_dir: str | Path) -> list[str] | None:
    """The question ids of the latest ``run_questions`` into ``run_dir`` (None: a folder without that file)."""
    path = Path(run_dir) / QUESTION_IDS
    if not path.is_file():
        return None
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(ids, list):
        raise ValueError(f"{path}: expected a JSON list of question ids")
    return [str(i) for i in ids]


def write_run_outputs(out_dir: str | Path, metrics: dict[str, float], table: str) -> None:
    """metrics.json (flat numbers) and table.md, written atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("metrics.json", json.dumps(metrics, indent=2, sort_keys=True)), ("table.md", table)):
        tmp = out / f".{name}.tmp"
        with naming(tmp):
            tmp.write_text(text + ("\n" if not text.endswith("\n") else ""), encoding="utf-8")
        tmp.replace(out / name)


__all__ = ["QUESTION_IDS", "RunFailed", "notify", "read_question_ids", "run_questions", "summarize", "write_run_outputs"]
