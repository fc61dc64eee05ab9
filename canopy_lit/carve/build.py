"""CARVE's composition root (METHOD.md §2): config -> its clip corpus, ranking and pipeline.

``canopy_lit.eval.carve.run`` (``method=carve``'s runner) builds through these; the ``carve/*`` groups name their
classes by ``_target_``, and ``CarveParts`` hands the models several stages share (encoder, LLM, describer,
cross-encoder, normalisation) to the constructors that take them. Like ``canopy_lit.pipeline.build`` for the
evidence loop, this is the only module of CARVE that instantiates a config.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf

from canopy_lit.carve.representations import ClipCorpus, video_clips
from canopy_lit.carve.rerank import ClipRanking, Normalisation
from canopy_lit.carve.stages import CarvePipeline
from canopy_lit.errors import ConfigError
from canopy_lit.types import Item

log = logging.getLogger(__name__)

__all__ = ["CarveParts", "build_carve_corpus", "build_carve_method", "build_carve_pipeline", "check_carve_method"]


class CarveParts:
    """The parts several CARVE stages share, each built once from its config on first use.

    The ``carve/*`` groups name only their own class; the text encoder (the ``encoder`` group), the LLM
    (``llm``), the frame describer (``carve.describer``), the stage-2 cross-encoder (``carve/reranker``)
    and the within-configuration normalisation (``carve/normalisation``) cannot live in those YAMLs, so
    ``build`` passes each one to the constructors that take it by that parameter name. The LLM is loaded
    only when a built part asks for it.

    Args:
        cfg: the composed evaluate config (``encoder``, ``llm``, ``carve``).
    """

    NAMES = ("encoder", "llm", "describe", "cross_encoder", "normalisation")

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg

    @cached_property
    def encoder(self) -> Any:
        return instantiate(self.cfg.encoder)

    @cached_property
    def llm(self) -> Any:
        return instantiate(self.cfg.llm)

    @cached_property
    def describe(self) -> Any:
        node = self.cfg.carve.get("describer")
        return instantiate(node) if node is not None else None

    @cached_property
    def cross_encoder(self) -> Any:
        return self.build(self.cfg.carve.reranker, "carve.reranker")

    @cached_property
    def normalisation(self) -> Normalisation:
        return instantiate(self.cfg.carve.normalisation)

    def build(self, node: DictConfig, where: str) -> Any:
        """``instantiate(node)`` plus the shared parts its ``_target_`` takes and the config does not set."""
        params = inspect.signature(get_object(str(node._target_))).parameters
        shared: dict[str, Any] = {}
        for name in self.NAMES:
            if name not in params or name in node:
                continue
            value = getattr(self, name)
            if value is None and params[name].default is inspect.Parameter.empty:
                raise ValueError(f"{where} ({node._target_}) needs the frame describer, but carve.describer is null")
            shared[name] = value
        return instantiate(node, **shared)


def build_carve_corpus(cfg: DictConfig, items: Sequence[Item], parts: CarveParts) -> ClipCorpus:
    """The clips of every readable video, embedded under the four configurations (``cfg.carve``)."""
    c = cfg.carve
    builder = instantiate(c.clips)
    missing = [i.id for i in items if i.video is not None and not Path(i.video.path).is_file()]
    if missing:
        log.warning("CARVE: %d video(s) not found, left out of the corpus: %s", len(missing), ", ".join(missing[:5]))
    items = [i for i in items if i.video is not None and Path(i.video.path).is_file()]
    corpus = ClipCorpus.build(
        video_clips(items, builder), visual=parts.build(c.visual_encoder, "carve.visual_encoder"),
        summariser=parts.build(c.summariser, "carve.summariser"), text_encoder=parts.encoder,
        describe=parts.describe,
    )  # fmt: skip
    corpus.meta["clip_seconds"] = builder.clip_seconds
    corpus.meta["frame_interval"] = builder.frame_interval
    return corpus


def check_carve_method(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` when the ``carve/method`` option leaves a key to the user (``???``) that is not
    set, e.g. ``carve.method.config`` of ``single``: cheap, so that a run says so before building its corpus."""
    node = cfg.carve.method
    missing = [str(key) for key in node if OmegaConf.is_missing(node, str(key))]
    if missing:
        raise ConfigError([f"carve.method.{key} must be set for {node._target_}" for key in missing])


def build_carve_method(cfg: DictConfig, parts: CarveParts) -> ClipRanking:
    """The ranking of the ``carve/method`` group: CARVE's reranker (its cross-encoder and normalisation
    from ``parts``), fixed fusion (rrf) or one configuration alone (single).

    Raises:
        ConfigError: a key the option leaves to the user is not set (``check_carve_method``).
    """
    check_carve_method(cfg)
    return parts.build(cfg.carve.method, "carve.method")


def build_carve_pipeline(cfg: DictConfig, corpus: ClipCorpus, parts: CarveParts) -> CarvePipeline:
    """``CarvePipeline`` of ``cfg.carve``: its method's ranking, and the reader only with ``carve.generate``."""
    c = cfg.carve
    return CarvePipeline(
        corpus,
        build_carve_method(cfg, parts),
        k=int(c.k),
        pool_k=int(c.pool_k),
        reader=parts.build(c.reader, "carve.reader") if c.generate else None,
        scope=str(c.scope),
        recall_ks=[int(k) for k in c.recall_ks],
        min_iou=float(c.min_iou),
        workers=int(c.workers),
    )
