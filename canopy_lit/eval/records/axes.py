"""``run.json``: the ablation axes of a run (method, benchmark, k, B, R, refiner, scorer, adapter and its hash,
...), recorded when the evaluation starts, so that reports read what ran (``run_axes``)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from canopy_lit.encoders.fingerprint import read_fingerprint
from canopy_lit.io import atomic_write_text, naming

log = logging.getLogger(__name__)


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
    """``canopy_lit.refine.FlatTopMRefiner`` -> ``flat_top_m``: the ``refine`` option of a config composed
    without Hydra's group choices (``refine_label``)."""
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
    """The ``refine`` group's option (from the class name in a config composed without choices)."""
    return _chosen(choices, "refine") or refiner_name(cfg_get(cfg, "refine._target_"))


# Refiners that read no node score: their runs name no scorer (the scorer group is still composed).
UNSCORED_REFINERS = frozenset({"keep_whole", "longllmlingua"})


def scorer_name(cfg: Mapping[str, Any], choices: Mapping[str, Any] | None = None) -> str | None:
    """The node scorer behind a run's evidence: None for whole items in QA runs (nothing scored), f0 for the
    ``scorer=f0`` view (RECOMP's), else
    fθ when an adapter is loaded (``fθ×s`` when it is scaled toward f0 by ``encoder.adapter_scale``) and f0 otherwise."""
    if cfg_get(cfg, "encoder") is None:
        return None
    if cfg_get(cfg, "mode", "qa") in ("qa", "evidence") and refine_label(cfg, choices) in UNSCORED_REFINERS:
        return None
    if cfg_get(cfg, "scorer.frozen") or _unset(cfg_get(cfg, "encoder.adapter")):
        return "f0"
    scale = float(cfg_get(cfg, "encoder.adapter_scale", 1.0) or 0.0)
    return "fθ" if scale == 1.0 else f"fθ×{scale:g}"  # interpolated toward f0 (encoder.adapter_scale): not fθ


def retrieval_scope(cfg: Mapping[str, Any]) -> str | None:
    """corpus | candidates | benchmark: the ``retriever`` group's option, as its node names it."""
    return cfg_get(cfg, "retriever.name")


def controller_name(cfg: Mapping[str, Any]) -> str | None:
    """critic | ircot | none from the ``controller`` group's function: the option of a config composed
    without Hydra's group choices."""
    target = cfg_get(cfg, "controller._target_")
    if not target:
        return None
    name = str(target).rsplit(".", 1)[-1].removesuffix("_controller")
    return {"no": "none"}.get(name, name)


def retriever_name(cfg: Mapping[str, Any]) -> str | None:
    """dense | bm25 | hybrid: the candidate ranking (scope=candidates/benchmark) or the corpus retriever."""
    if cfg_get(cfg, "retrieval") is None:
        return None
    if (retrieval_scope(cfg) or "corpus") in ("candidates", "benchmark"):
        # a CandidateRanking block: its class
        target = str(cfg_get(cfg, "retrieval.candidate_ranking._target_") or "").rsplit(".", 1)[-1]
        return {"BM25Ranking": "bm25", "HybridRanking": "hybrid"}.get(target, "dense")
    target = str(cfg_get(cfg, "retrieval._target_") or "")
    return {"build_bm25_retriever": "bm25", "build_hybrid_retriever": "hybrid"}.get(target.rsplit(".", 1)[-1], "dense")


# Options of the ``retrieval`` group that are the dense retriever over another index: labelled by their ranking.
DENSE_RETRIEVAL_OPTIONS = frozenset({"default", "flat", "ivfpq"})


def retriever_label(cfg: Mapping[str, Any], choices: Mapping[str, Any] | None = None) -> str | None:
    """dense | bm25 | hybrid | another ``retrieval`` option's name: how a round's items are ranked
    (``retriever_name`` for a config composed without choices)."""
    option = _chosen(choices, "retrieval")
    if option is None or cfg_get(cfg, "retrieval") is None:
        return retriever_name(cfg)
    return "dense" if option in DENSE_RETRIEVAL_OPTIONS else option


def run_axes(cfg: Mapping[str, Any], choices: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ablation axes of a run, from its resolved config (plain dicts) and Hydra's group choices.

    The one place that knows where each axis lives in the config: the evaluation records the
    result in ``run.json``, which reports read. Labels of group options (refiner, controller, retrieval
    scope and ranking, variant) are the options Hydra chose (``choices``, recorded under that key); without
    them (a config composed by hand) they are read back from the config.
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
    """``<run_dir>/run.json`` (None when absent: not an evaluation run folder, or one still starting)."""
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

