"""Durable per-question records: append + flush + fsync one JSON line per finished question, resume by id.

A run killed at any point (even SIGKILL mid-write) leaves at most one partial last
line; ``RecordLog`` cuts it off on open, so a restart re-does exactly the unfinished
questions and every question ends up in the file exactly once.

``RunLock`` keeps a second evaluation out of a run folder while one is writing it, and
``read_predictions`` is how anything else reads the file (one record per question id).

``run.json`` records the run's ablation axes (method, benchmark, k, B, R, refiner, scorer, adapter
and its hash, ...) when the evaluation starts, so that reports read what ran instead of
re-deriving it from a config layout that may have changed since (``run_axes``).

``settings.json`` records every setting the records depend on (``run_settings``), so that a rerun into a
folder with results made under other settings is refused instead of continuing and relabelling them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.encoders.fingerprint import read_fingerprint
from canopy_lit.io import atomic_write_text

log = logging.getLogger(__name__)


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Give an ``OSError`` raised inside the file name ``path`` when it has none: a failed ``write(2)``
    (a full disk) carries no name, and the user must learn where space ran out."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno is None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from err


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
            with naming(tmp), tmp.open("w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in self.done.values())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        # Unbuffered: a failed write leaves nothing behind in a buffer for close() to retry.
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

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
            if not isinstance(rec, dict) or "id" not in rec:
                raise DataFormatError(self.path, "expected a JSON object with an \"id\"; fix or remove it to resume", line=n)
            self.done[str(rec["id"])] = rec  # a later line for the same id wins (retried failures)
        if end < len(raw):
            with self.path.open("r+b") as fh:
                fh.truncate(end)
        return len(raw) - end

    def __contains__(self, qid: str) -> bool:
        return qid in self.done

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one line and fsync it; an ``OSError`` (a full disk) names the file and leaves
        the file as it was, ending on a whole record."""
        line = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        assert self._fd is not None, "append to a closed RecordLog"
        start = os.fstat(self._fd).st_size
        with naming(self.path):
            try:
                while line:
                    line = line[os.write(self._fd, line) :]
                os.fsync(self._fd)
            except OSError:
                with contextlib.suppress(OSError):  # a full disk may have taken part of the line
                    os.ftruncate(self._fd, start)
                raise
        self.done[str(record["id"])] = record

    def records(self) -> Iterator[dict[str, Any]]:
        return iter(self.done.values())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RecordLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``predictions.jsonl`` ([] when absent), one per question id, in first-seen order.

    A later line for an id replaces the earlier one (a retried failure, or two runs that wrote
    the same folder before it was locked); a torn last line is ignored; a bad line before it, or a
    line that is not a JSON object, raises ``ValueError`` naming file and line.
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
        if not isinstance(rec, dict):
            raise DataFormatError(path, f"expected a JSON object (one record per line), got {type(rec).__name__}", line=n)
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


def group_choices(choices: Mapping[str, Any] | None) -> dict[str, Any]:
    """Hydra's runtime choices ``{group: option}`` of a run's own config groups (``hydra.runtime.choices``
    without Hydra's ``hydra`` / ``hydra/*`` groups): the option names that label a run in tables."""
    return {str(g): o for g, o in (choices or {}).items() if g != "hydra" and not str(g).startswith("hydra/")}


def _chosen(choices: Mapping[str, Any] | None, group: str) -> str | None:
    option = (choices or {}).get(group)
    return None if option is None else str(option)


def refiner_name(target: Any) -> str | None:
    """``canopy_lit.refine.FlatTopMRefiner`` -> ``flat_top_m``: the ``refine`` option of a run folder written
    before run.json recorded the group choices (``refine_label``)."""
    if not target:
        return None
    cls = str(target).rsplit(".", 1)[-1].removesuffix("Refiner")
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cls).lower()
    return {"flat_top": "flat_top_m", "long_llm_lingua": "longllmlingua"}.get(snake, snake)


def adapter_axes(cfg: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(portable path, adapter hash) of ``encoder.adapter``; (None, None) for f0.

    Absolute paths name the machine that ran the study, so the path is cut to start at its
    ``outputs`` folder, else made relative to the project root, else reduced to its name. The hash is
    of the weights the run loads (``adapter_weights_hash``), so two runs of one adapter path with different
    weights can be told apart even when a weights file was replaced after saving; the hash that
    ``encoder_fingerprint.json`` recorded is used only for an adapter without ``adapter_model.safetensors``.
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
    digest = adapter_weights_hash(full)
    if digest is None:
        digest = (read_fingerprint(full) or {}).get("adapter_hash")
    return path.as_posix(), (str(digest) if digest else None)


# safetensors dtypes of float adapter weights -> numpy (bfloat16 read as its 16 bits, widened below)
_SAFETENSORS_FLOATS = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def adapter_weights_hash(adapter: Path) -> str | None:
    """``NodeEncoder.adapter_hash()`` of the adapter that loading folder ``adapter`` yields (scale 1), read
    from its ``adapter_model.safetensors`` without torch: each LoRA weight under the name peft gives it
    (``lora_A.weight`` -> ``lora_A.default.weight``), as float32. None when the folder has no such file.
    """

    weights = adapter / "adapter_model.safetensors"
    if not weights.is_file():
        return None
    try:
        with weights.open("rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            data = f.read()
    except (OSError, ValueError) as err:
        raise ValueError(f"{weights}: cannot read the adapter weights ({err})") from err
    tensors: dict[str, Any] = {}
    for key, spec in header.items():
        if key == "__metadata__" or "lora_" not in key:
            continue
        dtype = _SAFETENSORS_FLOATS.get(spec["dtype"])
        if dtype is None:
            raise ValueError(f"{weights}: adapter weight {key} has dtype {spec['dtype']}, not a float")
        start, end = spec["data_offsets"]
        arr = np.frombuffer(data[start:end], dtype=dtype)
        if spec["dtype"] == "BF16":  # bfloat16 = the top 16 bits of a float32
            arr = (arr.astype("<u4") << 16).view("<f4")
        tensors[re.sub(r"(\.lora_[^.]+)(\.|$)", r"\1.default\2", key, count=1)] = arr.astype("<f4")
    h = hashlib.sha256()  # = canopy_lit.encoders.base.tensors_hash of the loaded parameters
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].tobytes())
    return h.hexdigest()[:16]


def refine_label(cfg: Mapping[str, Any], choices: Mapping[str, Any] | None = None) -> str | None:
    """The ``refine`` group's option (from the class name in run folders written without choices)."""
    return _chosen(choices, "refine") or refiner_name(cfg_get(cfg, "refine._target_"))


# Refiners that read no node score: their runs name no scorer (the scorer group is still composed).
UNSCORED_REFINERS = frozenset({"keep_whole", "longllmlingua"})


def scorer_name(cfg: Mapping[str, Any], choices: Mapping[str, Any] | None = None) -> str | None:
    """The node scorer behind a run's evidence: None for whole items in QA runs (nothing scored), f0 for the
    ``scorer=f0`` view (RECOMP's; ``refine.scorer`` in run folders written before the ``scorer`` group), else
    fθ when an adapter is loaded (``fθ×s`` when it is scaled toward f0 by ``encoder.adapter_scale``) and f0 otherwise."""
    if cfg_get(cfg, "encoder") is None:
        return None
    own = cfg_get(cfg, "refine.scorer")
    if own:
        return {"ftheta": "fθ"}.get(str(own), str(own))
    if cfg_get(cfg, "mode", "qa") in ("qa", "evidence") and refine_label(cfg, choices) in UNSCORED_REFINERS:
        return None
    if cfg_get(cfg, "scorer.frozen") or _unset(cfg_get(cfg, "encoder.adapter")):
        return "f0"
    scale = float(cfg_get(cfg, "encoder.adapter_scale", 1.0) or 0.0)
    return "fθ" if scale == 1.0 else f"fθ×{scale:g}"  # interpolated toward f0 (encoder.adapter_scale): not fθ


def retrieval_scope(cfg: Mapping[str, Any]) -> str | None:
    """corpus | candidates | benchmark: the ``retriever`` group's option (``retrieval.scope`` in run
    folders written before that group existed)."""
    return cfg_get(cfg, "retriever.name") or cfg_get(cfg, "retrieval.scope")


def controller_name(cfg: Mapping[str, Any]) -> str | None:
    """critic | ircot | none from the ``controller`` group's function (``method.controller`` in older
    configs): the option of a run folder written before run.json recorded the group choices."""
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
        ranking = cfg_get(cfg, "retrieval.candidate_ranking") or "dense"  # a name in run folders before its block
        if isinstance(ranking, Mapping):  # a CandidateRanking block: its class
            target = str(ranking.get("_target_") or "").rsplit(".", 1)[-1]
            return {"BM25Ranking": "bm25", "HybridRanking": "hybrid"}.get(target, "dense")
        return str(ranking)
    target = str(cfg_get(cfg, "retrieval._target_") or "")
    return {"build_bm25_retriever": "bm25", "build_hybrid_retriever": "hybrid"}.get(target.rsplit(".", 1)[-1], "dense")


# Options of the ``retrieval`` group that are the dense retriever over another index: labelled by their ranking.
DENSE_RETRIEVAL_OPTIONS = frozenset({"default", "flat", "ivfpq"})


def retriever_label(cfg: Mapping[str, Any], choices: Mapping[str, Any] | None = None) -> str | None:
    """dense | bm25 | hybrid | another ``retrieval`` option's name: how a round's items are ranked
    (``retriever_name`` for run folders written without choices)."""
    option = _chosen(choices, "retrieval")
    if option is None or cfg_get(cfg, "retrieval") is None:
        return retriever_name(cfg)
    return "dense" if option in DENSE_RETRIEVAL_OPTIONS else option


def run_axes(cfg: Mapping[str, Any], choices: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ablation axes of a run, from its resolved config (plain dicts) and Hydra's group choices.

    The one place that knows where each axis lives in the config: the evaluation records the
    result in ``run.json``; reports recompute it only for run folders written before that file.
    Labels of group options (refiner, controller, retrieval scope and ranking, variant) are the options
    Hydra chose (``choices``, recorded under that key); without them (a config written by hand, a run
    folder from before) they are read back from the config.
    """
    choices = group_choices(choices)
    refine = refine_label(cfg, choices)
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
        # flat_matched: the δ of the CANOPY evidence whose tokens it is matched to
        "descend_margin": cfg_get(cfg, "refine.descend_margin") if refine in ("parent_relative", "flat_matched") else None,
        "k": cfg_get(cfg, "retrieval.k"),
        "B": cfg_get(cfg, "tree.branching"),
        "R": cfg_get(cfg, "loop.max_rounds"),
        "exclude_seen": cfg_get(cfg, "retrieval.exclude_seen"),
        "routing": cfg_get(cfg, "retrieval.routing"),
        "scope": _chosen(choices, "retriever") or retrieval_scope(cfg),
        "controller": _chosen(choices, "controller") or controller_name(cfg),
        "retriever": retriever_label(cfg, choices),
        "scorer": scorer_name(cfg, choices),
        "encoder": cfg_get(cfg, "encoder.backbone") or cfg_get(cfg, "encoder.name"),
        "adapter": adapter,
        "adapter_hash": adapter_hash,  # of the weights loaded; adapter_scale multiplies their update
        "adapter_scale": None if adapter is None else float(cfg_get(cfg, "encoder.adapter_scale", 1.0)),
        "reader": cfg_get(cfg, "llm.model") or cfg_get(cfg, "llm.name"),
        "cap": cfg_get(cfg, "loop.reader_max_tokens"),
        "tokenizer": cfg_get(cfg, "evidence.tokenizer"),
        "variant": _chosen(choices, "variant"),
        "study": cfg_get(cfg, "study"),
        # a text compressor's target rate and LM (recorded only for it, so other run.json files stay as they were)
        **(
            {"rate": cfg_get(cfg, "refine.rate"), "compressor": cfg_get(cfg, "refine.model")}
            if refine == "longllmlingua"
            else {}
        ),
        # how node embeddings are formed (late chunking, cross: read after the question), recorded only when not
        # per node, so the run.json of every per-node run stays as it was
        **(
            {"node_pooling": pooling}
            if (pooling := cfg_get(cfg, "encoder.node_pooling")) not in (None, "node")
            else {}
        ),
        # item-level pruning (off by default: recorded only when on, so the paper's runs stay as they were)
        **(
            {"item_margin": cfg_get(cfg, "refine.item_margin")}
            if refine == "parent_relative" and cfg_get(cfg, "refine.item_margin") is not None
            else {}
        ),
        **({"choices": choices} if choices else {}),
    }


def write_run_axes(run_dir: str | Path, cfg: Any) -> Path:
    """Write ``<run_dir>/run.json`` (atomically) from an evaluation config (DictConfig or plain dicts).

    Interpolations are resolved where they can be (an unset env variable leaves the config as
    written); the group choices come from the running Hydra job, when there is one.
    """
    choices: dict[str, Any] = {}
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            choices = dict(HydraConfig.get().runtime.choices)
    except ImportError:  # pragma: no cover - hydra is a dependency
        pass
    path = Path(run_dir) / RUN_FILE
    with naming(path):
        return atomic_write_text(path, json.dumps(run_axes(plain_config(cfg), choices), indent=2, ensure_ascii=False) + "\n")


def plain_config(cfg: Any) -> dict[str, Any]:
    """A config as plain dicts, each top-level entry resolved where it can be: an unresolvable value (an
    unset env variable) leaves only its own entry as written, and must not stop a run."""

    if not OmegaConf.is_config(cfg):
        return dict(cfg)
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except Exception:
        raw = OmegaConf.to_container(cfg, resolve=False)
        assert isinstance(raw, dict)
        out: dict[str, Any] = {}
        for key in raw:
            try:
                value = cfg[key]
                out[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            except Exception:
                out[key] = raw[key]
        return out


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


# --- settings.json: what a run folder's records were made with ------------------------------------

SETTINGS_FILE = "settings.json"
# Config keys (or whole groups) that never change a record: how fast, how many, where, and post hoc
# judging. Every other key of the resolved config is a setting, so a key added later is one too.
ANSWER_NEUTRAL_KEYS = frozenset({
    "threads", "concurrency", "progress", "print_config", "limit", "retry_failed", "max_consecutive_failures", "resume",
    "shard",  # which part of the questions ran (run.json names it; canopy_lit.eval.shards)
    "judge",  # verdicts go to judgements.jsonl, never into the records
    "study",  # a label for reports
    "logger",  # where the results are mirrored (W&B)
    "paths",  # where the project, data, caches and run folder are (paths under them are kept relative)
    "retrieval.cache_dir", "retrieval.node_cache_dir",  # caches keyed by what they hold
    "loop.batched", "loop.max_batch",  # the same records as sequential (evaluate.yaml)
    "llm.n_threads", "llm.base_url", "llm.api_key_env", "llm.timeout", "llm.max_retries", "llm.max_concurrency",
})  # fmt: skip

# Keys added after run folders were recorded, at a default that gives the records of before: left out of the
# settings at that default, so that those folders still resume (and keep their fingerprint).
ABSENT_AT_DEFAULT = {"retrieval.corpus": None, "retrieval.corpus_options": {}}


def _flat(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _answer_keys(tree: Mapping[str, Any]) -> dict[str, Any]:
    """The flat ``a.b.c`` keys of ``tree`` but the answer-neutral ones."""
    neutral = tuple(f"{k}." for k in ANSWER_NEUTRAL_KEYS)
    return {k: v for k, v in _flat(tree) if k not in ANSWER_NEUTRAL_KEYS and not k.startswith(neutral)}


# ``_target_`` paths that moved without changing what they build. The encoder config named the factory
# ``load_encoder`` until it named the class (``TextEncoder`` / ``Qwen3VLEncoder``) directly; the factory
# picks the class from the backbone, so a recorded factory path compares as the class it built.
def _encoder_class_path(backbone: Any) -> str:
    from canopy_lit.encoders.qwen3vl import is_qwen3vl

    if is_qwen3vl(str(backbone)):
        return "canopy_lit.encoders.qwen3vl.Qwen3VLEncoder"
    return "canopy_lit.encoders.text.TextEncoder"


# Classes that moved module without changing what they build: old path -> today's.
MOVED_TARGETS = {
    "canopy_lit.pipeline.extractive.ExtractiveRefiner": "canopy_lit.refine.ExtractiveRefiner",
    "canopy_lit.eval.evidence.FlatMatchedRefiner": "canopy_lit.refine.FlatMatchedRefiner",
}


def canonical_targets(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` (flat, dotted) with every moved ``_target_`` written as what it builds today, so that a
    rename in code never makes an old run folder look like other settings."""
    out = {k: MOVED_TARGETS.get(v, v) if k.endswith("._target_") and isinstance(v, str) else v
           for k, v in settings.items()}  # fmt: skip
    if out.get("encoder._target_") == "canopy_lit.encoders.load_encoder":
        out["encoder._target_"] = _encoder_class_path(out.get("encoder.backbone", "minilm"))
    return out


def run_settings(cfg: Any) -> dict[str, Any]:
    """What a run's records depend on: every key of the resolved config (flat, dotted) but
    ``ANSWER_NEUTRAL_KEYS``, with paths under ``paths.*`` folders written relative to them (a moved
    checkout is the same run), plus ``encoder.adapter_hash``: retrained weights at the same path change answers.
    """
    tree = plain_config(cfg)
    tree.pop("hydra", None)
    roots = sorted(
        ((str(v).rstrip("/"), f"${{paths.{k}}}") for k, v in (tree.get("paths") or {}).items()
         if isinstance(v, str) and v.startswith("/") and v.strip("/")),
        key=lambda root: -len(root[0]),
    )  # fmt: skip
    settings: dict[str, Any] = {}
    for key, value in _answer_keys(tree).items():
        if key in ABSENT_AT_DEFAULT and value == ABSENT_AT_DEFAULT[key]:
            continue
        if isinstance(value, str):
            root = next(((r, name) for r, name in roots if value == r or value.startswith(f"{r}/")), None)
            value = value if root is None else root[1] + value[len(root[0]) :]
        settings[key] = value
    adapter_hash = adapter_axes(tree)[1]
    if adapter_hash:
        settings["encoder.adapter_hash"] = adapter_hash
    return json.loads(json.dumps(settings, default=str))  # as settings.json holds them


def settings_fingerprint(settings: Mapping[str, Any]) -> str:
    """A short hash of ``run_settings``: one id for every run folder made with the same settings."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


class RunFolderError(RuntimeError):
    """A run folder holds something a run cannot continue from; the message names the file and the remedy."""


def run_has_results(run_dir: str | Path) -> bool:
    """Whether a run folder holds results of an earlier run: records in predictions.jsonl, or metrics.json.

    Raises:
        RunFolderError: a line of predictions.jsonl before the last is not JSON (names file and line).
    """
    run_dir = Path(run_dir)
    try:
        records = read_predictions(run_dir / "predictions.jsonl")
    except ValueError as err:
        raise RunFolderError(f"{err}; fix or remove that line to resume") from None
    return bool(records) or (run_dir / "metrics.json").is_file()


def discard_refused_run_folder(run_dir: str | Path, log_names: tuple[str, ...] = ("evaluate.log",)) -> None:
    """A run refused before any work leaves no folder behind: remove ``run_dir`` when it holds nothing but what
    Hydra wrote at start (``.hydra/`` and the job log, one of ``log_names``). A folder with anything else (an
    earlier run's records, the user's own files) is left as it is."""
    run_dir = Path(run_dir)
    try:
        names = {p.name for p in run_dir.iterdir()}
    except OSError:
        return
    if not names <= {".hydra", *log_names}:
        return
    shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
    for name in names - {".hydra"}:
        (run_dir / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def settings_changes(run_dir: str | Path, cfg: Any) -> list[tuple[str, Any, Any]]:
    """``(key, recorded, now)`` for every setting of ``cfg`` that differs from the ones ``run_dir``'s
    results were made with ([] when they match, or when nothing recorded them).

    ``settings.json`` holds them; a run folder written before that file existed is compared on Hydra's
    ``.hydra/config.yaml`` instead: unresolved values of the keys both configs have.
    """
    run_dir = Path(run_dir)
    absent = "<absent>"
    stored = run_dir / SETTINGS_FILE
    if stored.is_file():
        try:
            recorded = json.loads(stored.read_text(encoding="utf-8"))["settings"]
        except (ValueError, KeyError, TypeError) as err:
            raise RunFolderError(f"{stored}: not a settings file ({err}); restore it, or use another hydra.run.dir") from None
        recorded, now = canonical_targets(recorded), canonical_targets(run_settings(cfg))
        keys = sorted(recorded.keys() | now.keys())
        return [(k, recorded.get(k, absent), now.get(k, absent)) for k in keys if recorded.get(k, absent) != now.get(k, absent)]
    legacy = run_dir / ".hydra" / "config.yaml"
    if not legacy.is_file():
        return []

    try:
        old = _answer_keys(yaml.safe_load(legacy.read_text(encoding="utf-8")) or {})
    except (yaml.YAMLError, AttributeError) as err:
        raise RunFolderError(f"{legacy}: not a Hydra config ({err}); restore it, or use another hydra.run.dir") from None
    new = _answer_keys(OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else cfg)
    old, new = canonical_targets(old), canonical_targets(new)
    return [(k, old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k] != new[k]]


def write_run_settings(run_dir: str | Path, cfg: Any) -> Path:
    """``<run_dir>/settings.json``: the settings (``run_settings``) and their fingerprint, written atomically."""
    settings = run_settings(cfg)
    text = json.dumps({"fingerprint": settings_fingerprint(settings), "settings": settings}, indent=1, ensure_ascii=False)
    path = Path(run_dir) / SETTINGS_FILE
    with naming(path):
        return atomic_write_text(path, text + "\n")


def write_hydra_files(run_dir: str | Path, cfg: Any) -> None:
    """``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` as Hydra writes them at job start, which
    the evaluate config turns off (``hydra.output_subdir: null``) so that they are written only once the run
    folder is locked and checked. Outside a Hydra job only ``config.yaml``."""

    files = {"config.yaml": OmegaConf.to_yaml(cfg)}
    if HydraConfig.initialized():
        files["hydra.yaml"] = OmegaConf.to_yaml(HydraConfig.instance().cfg)
        files["overrides.yaml"] = OmegaConf.to_yaml(HydraConfig.get().overrides.task)
    for name, text in files.items():
        path = Path(run_dir) / ".hydra" / name
        with naming(path):
            atomic_write_text(path, text)
