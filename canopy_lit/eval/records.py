"""Durable per-question records: append + flush + fsync one JSON line per finished question, resume by id.

A run killed at any point (even SIGKILL mid-write) leaves at most one partial last
line; ``RecordLog`` cuts it off on open, so a restart re-does exactly the unfinished
questions and every question ends up in the file exactly once.

``RunLock`` keeps a second evaluation out of a run folder while one is writing it, and
``read_predictions`` is how anything else reads the file (one record per question id).

``run.json`` records the run's ablation axes (method, benchmark, k, B, R, refiner, scorer, adapter
and its hash, ...) when the evaluation starts, so that reports read what ran instead of
re-deriving it from a config layout that may have changed since (``run_axes``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from canopy_lit.io import atomic_write_text

log = logging.getLogger(__name__)


class RecordLog:
    """Append-only JSONL keyed by ``id``.

    Args:
        path: the ``predictions.jsonl`` file (created with its folder if missing).
        retry_failed: forget records with ``status == "failed"`` (rewriting the file without them),
            so that those questions run again.
    """

    def __init__(self, path: str | Path, retry_failed: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: dict[str, dict[str, Any]] = {}
        self.repaired_bytes = self._load()
        if retry_failed and any(r.get("status") == "failed" for r in self.done.values()):
            self.done = {k: r for k, r in self.done.items() if r.get("status") != "failed"}
            tmp = self.path.with_suffix(".jsonl.tmp")
            with tmp.open("w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in self.done.values())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        self._fh = self.path.open("a", encoding="utf-8")

    def _load(self) -> int:
        if not self.path.exists():
            return 0
        raw = self.path.read_bytes()
        end = raw.rfind(b"\n") + 1  # everything after the last newline is a torn write
        for n, line in enumerate(raw[:end].splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{self.path}: line {n} is not valid JSON ({err}); fix or remove it to resume") from err
            self.done[str(rec["id"])] = rec  # a later line for the same id wins (retried failures)
        if end < len(raw):
            with self.path.open("r+b") as fh:
                fh.truncate(end)
        return len(raw) - end

    def __contains__(self, qid: str) -> bool:
        return qid in self.done

    def append(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.done[str(record["id"])] = record

    def records(self) -> Iterator[dict[str, Any]]:
        return iter(self.done.values())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``predictions.jsonl`` ([] when absent), one per question id, in first-seen order.

    A later line for an id replaces the earlier one (a retried failure, or two runs that wrote
    the same folder before it was locked); a torn last line is ignored; a bad line before it
    raises ``ValueError`` naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            if n == len(lines):
                log.warning("%s: ignoring a torn last line", path)
                break
            raise ValueError(f"{path}: line {n} is not valid JSON ({err})") from err
        out[str(rec.get("id", f"line {n}"))] = rec
    return list(out.values())


class RunLocked(RuntimeError):
    """Another live process holds the run folder; the message names its pid and host."""


class RunLock:
    """Exclusive use of a run folder: ``<run dir>/.lock`` holding the owner's pid, host and start time.

    The lock is a ``flock`` on that file, so the kernel releases it when the owner dies, even by
    SIGKILL: a lock file left by a dead process is stale and is taken over (and said so), with no
    pid-liveness guess and no window in which two takers both win. A live holder makes
    ``acquire`` raise ``RunLocked`` naming its pid and host. Released locks remove the file.

    Args:
        run_dir: the run folder (created if missing).
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / ".lock"
        self._fd: int | None = None

    def holder(self) -> dict[str, Any]:
        """What the lock file says about its owner ({} when absent or unreadable)."""
        try:
            return json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                h = self.holder()
                raise RunLocked(
                    f"{self.path.parent}: run folder in use by pid {h.get('pid', '?')} on host {h.get('host', '?')} "
                    f"(started {h.get('started', '?')}); wait for it, or use another hydra.run.dir"
                ) from None
            # The holder may have released and unlinked the file between our open and flock: the
            # lock must be on the file that is at the path now, else another process can lock that one.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        stale = self.holder()
        if stale:
            log.warning(
                "%s: taking over the stale lock of pid %s on host %s (that process is gone)",
                self.path, stale.get("pid", "?"), stale.get("host", "?"),
            )
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        # Unlink while still holding the lock: a waiter that opened the old file sees the inode change.
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# --- run.json: the ablation axes of a run --------------------------------------------------------

RUN_FILE = "run.json"
FINGERPRINT_FILE = "encoder_fingerprint.json"  # canopy_lit.encoders.base.FINGERPRINT_FILE (no torch import here)


def cfg_get(cfg: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for ``"a.b"``; ``default`` when any part is missing."""
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return default
        cur = cur[part]
    return cur


def _unset(v: Any) -> bool:
    return v in (None, "", "null", "None")


def refiner_name(target: Any) -> str | None:
    """``canopy_lit.refine.FlatTopMRefiner`` -> ``flat_top_m`` (the ``refine`` group's option names)."""
    if not target:
        return None
    cls = str(target).rsplit(".", 1)[-1].removesuffix("Refiner")
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cls).lower()
    return {"flat_top": "flat_top_m"}.get(snake, snake)


def adapter_axes(cfg: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(portable path, adapter hash) of ``encoder.adapter``; (None, None) for f0.

    Absolute paths name the machine that ran the study, so the path is cut to start at its
    ``outputs`` folder, else made relative to the project root, else reduced to its name. The hash
    comes from ``<adapter>/encoder_fingerprint.json`` (written by ``save_adapter``) when it is there,
    so two runs of one adapter path with different weights can be told apart.
    """
    raw = cfg_get(cfg, "encoder.adapter")
    if _unset(raw):
        return None, None
    path = Path(str(raw))
    root = cfg_get(cfg, "paths.root_dir")
    full = path if path.is_absolute() or not isinstance(root, str) or "${" in root else Path(root) / path
    if path.is_absolute():
        if "outputs" in path.parts[:-1]:
            path = Path(*path.parts[path.parts.index("outputs") :])
        elif isinstance(root, str) and path.is_relative_to(root):
            path = path.relative_to(root)
        else:
            path = Path(path.name)
    meta_file = full / FINGERPRINT_FILE
    digest = None
    if meta_file.is_file():
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{meta_file}: not valid JSON ({err})") from err
        digest = meta.get("adapter_hash") if isinstance(meta, dict) else None
    return path.as_posix(), (str(digest) if digest else None)


def scorer_name(cfg: Mapping[str, Any]) -> str | None:
    """The node scorer behind a run's evidence: a refiner's own (``refine.scorer``, e.g. RECOMP's f0),
    None for whole items in QA runs (nothing scored), else fθ when an adapter is loaded (``fθ×s`` when it is
    scaled toward f0 by ``encoder.adapter_scale``) and f0 otherwise."""
    if cfg_get(cfg, "encoder") is None:
        return None
    own = cfg_get(cfg, "refine.scorer")
    if own:
        return {"ftheta": "fθ"}.get(str(own), str(own))
    if cfg_get(cfg, "mode", "qa") in ("qa", "evidence") and refiner_name(cfg_get(cfg, "refine._target_")) == "keep_whole":
        return None
    if _unset(cfg_get(cfg, "encoder.adapter")):
        return "f0"
    scale = float(cfg_get(cfg, "encoder.adapter_scale", 1.0) or 0.0)
    return "fθ" if scale == 1.0 else f"fθ×{scale:g}"  # interpolated toward f0 (encoder.adapter_scale): not fθ


def retrieval_scope(cfg: Mapping[str, Any]) -> str | None:
    """corpus | candidates | benchmark: the ``retriever`` group's option (``retrieval.scope`` in run
    folders written before that group existed)."""
    return cfg_get(cfg, "retriever.name") or cfg_get(cfg, "retrieval.scope")


def controller_name(cfg: Mapping[str, Any]) -> str | None:
    """critic | ircot | none: the ``controller`` group's function (``method.controller`` in older configs)."""
    target = cfg_get(cfg, "controller._target_")
    if target:
        name = str(target).rsplit(".", 1)[-1].removesuffix("_controller")
        return {"no": "none"}.get(name, name)
    return cfg_get(cfg, "method.controller")


def retriever_name(cfg: Mapping[str, Any]) -> str | None:
    """dense | bm25 | hybrid: the candidate ranking (scope=candidates/benchmark) or the corpus retriever."""
    if cfg_get(cfg, "retrieval") is None:
        return None
    if (retrieval_scope(cfg) or "corpus") in ("candidates", "benchmark"):
        return str(cfg_get(cfg, "retrieval.candidate_ranking") or "dense")
    target = str(cfg_get(cfg, "retrieval._target_") or "")
    return {"build_bm25_retriever": "bm25", "build_hybrid_retriever": "hybrid"}.get(target.rsplit(".", 1)[-1], "dense")


def run_axes(cfg: Mapping[str, Any], choices: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ablation axes of a run, from its resolved config (plain dicts) and Hydra's group choices.

    The one place that knows where each axis lives in the config: the evaluation records the
    result in ``run.json``; reports recompute it only for run folders written before that file.
    """
    refine = refiner_name(cfg_get(cfg, "refine._target_"))
    adapter, adapter_hash = adapter_axes(cfg)
    return {
        "mode": cfg_get(cfg, "mode"),
        "method": cfg_get(cfg, "method.name"),
        "method_label": cfg_get(cfg, "method.label"),
        "benchmark": cfg_get(cfg, "data.name"),
        "split": cfg_get(cfg, "data.split"),
        "limit": cfg_get(cfg, "limit"),
        "refine": refine,
        "m": cfg_get(cfg, "refine.m") if refine == "flat_top_m" else None,
        "descend_margin": cfg_get(cfg, "refine.descend_margin") if refine == "parent_relative" else None,
        "k": cfg_get(cfg, "retrieval.k"),
        "B": cfg_get(cfg, "tree.branching"),
        "R": cfg_get(cfg, "loop.max_rounds"),
        "exclude_seen": cfg_get(cfg, "retrieval.exclude_seen"),
        "routing": cfg_get(cfg, "retrieval.routing"),
        "scope": retrieval_scope(cfg),
        "controller": controller_name(cfg),
        "retriever": retriever_name(cfg),
        "scorer": scorer_name(cfg),
        "encoder": cfg_get(cfg, "encoder.backbone") or cfg_get(cfg, "encoder.name"),
        "adapter": adapter,
        "adapter_hash": adapter_hash,  # of the saved weights; adapter_scale multiplies their update
        "adapter_scale": None if adapter is None else float(cfg_get(cfg, "encoder.adapter_scale", 1.0)),
        "reader": cfg_get(cfg, "llm.model") or cfg_get(cfg, "llm.name"),
        "cap": cfg_get(cfg, "loop.reader_max_tokens"),
        "tokenizer": cfg_get(cfg, "evidence.tokenizer"),
        "variant": (choices or {}).get("variant"),
        "study": cfg_get(cfg, "study"),
    }


def write_run_axes(run_dir: str | Path, cfg: Any) -> Path:
    """Write ``<run_dir>/run.json`` (atomically) from an evaluation config (DictConfig or plain dicts).

    Interpolations are resolved where they can be (an unset env variable leaves the config as
    written); the group choices come from the running Hydra job, when there is one.
    """
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        try:
            cfg = OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # an unresolvable value elsewhere in the config must not stop the run
            cfg = OmegaConf.to_container(cfg, resolve=False)
    choices: dict[str, Any] = {}
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            choices = dict(HydraConfig.get().runtime.choices)
    except ImportError:  # pragma: no cover - hydra is a dependency
        pass
    path = Path(run_dir) / RUN_FILE
    return atomic_write_text(path, json.dumps(run_axes(cfg, choices), indent=2, ensure_ascii=False) + "\n")


def read_run_axes(run_dir: str | Path) -> dict[str, Any] | None:
    """``<run_dir>/run.json`` (None when absent: a run folder written before it existed)."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        axes = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(axes, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return axes
