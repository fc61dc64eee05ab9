"""How each config node of evaluate.py and train.py is checked (``Group``): its schema, its targets, extra keys."""

from __future__ import annotations

from dataclasses import dataclass

from canopy_lit.schema.schemas import (
    CarveSchema,
    CriticSchema,
    DataModuleSchema,
    DataSchema,
    EncoderSchema,
    EvidenceSchema,
    JudgeSchema,
    LLMSchema,
    LoopSchema,
    MethodSchema,
    ModelSchema,
    ReaderSchema,
    RefineSchema,
    RetrievalEvalSchema,
    RetrievalSchema,
    RetrieverSchema,
    TrainerSchema,
    TreeSchema,
)

# --------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class Group:
    """How one config node is checked.

    Attributes:
        schema: a dataclass. Without targets its fields are the node's keys; with them, their rules.
        targets: callables (dotted paths) whose keyword arguments are the node's keys, besides the
            node's own ``_target_``.
        extra: keys read by the pipeline beside the targets' arguments (typed by ``schema``).
        blocks: a node of named ``_target_`` blocks (``logger``, ``callbacks``), each checked by its target.
    """

    schema: type | None = None
    targets: tuple[str, ...] = ()
    extra: frozenset[str] = frozenset()
    blocks: bool = False


# Keys of the retrieval group that are no index builder's arguments: the loop owns k and exclude_seen,
# the node cache and the candidate ranking are read by the pipeline.
PIPELINE_RETRIEVAL_KEYS = frozenset({"k", "exclude_seen", "node_cache_dir", "candidate_ranking"})
_UNCHECKED = None  # a group whose values are paths or Hydra's own settings

EVAL_GROUPS: dict[str, Group | None] = {
    "paths": _UNCHECKED,
    "hydra": _UNCHECKED,
    "method": Group(MethodSchema),
    "loop": Group(LoopSchema),
    "retrieval": Group(RetrievalSchema, extra=PIPELINE_RETRIEVAL_KEYS),
    "retriever": Group(RetrieverSchema, extra=frozenset({"name"})),
    "controller": Group(),
    "critic": Group(CriticSchema),
    "reader": Group(ReaderSchema),
    "tree": Group(TreeSchema),
    "refine": Group(RefineSchema),
    "scorer": Group(),  # the encoder view nodes are scored through (canopy_lit.scoring.scorers.node_scorer)
    "llm": Group(LLMSchema),
    "judge": Group(JudgeSchema),
    "logger": Group(blocks=True),  # logger=wandb: the run mirrored to W&B (canopy_lit.tracking.log_evaluation)
    "encoder": Group(EncoderSchema),
    "data": Group(DataSchema, targets=("canopy_lit.data.splits.load_split",)),
    "evidence": Group(EvidenceSchema),
    "retrieval_eval": Group(RetrievalEvalSchema),
    "carve": Group(
        CarveSchema,
        targets=("canopy_lit.carve.stages.CarvePipeline",),
        extra=frozenset({
            "clips", "describer", "visual_encoder", "summariser", "reranker", "normalisation", "generate",
            "frame_units", "rrf_k",
        }),  # fmt: skip
    ),
}
TRAIN_GROUPS: dict[str, Group | None] = {
    "paths": _UNCHECKED,
    "hydra": _UNCHECKED,
    "tree": Group(TreeSchema),
    "encoder": Group(EncoderSchema),
    "datamodule": Group(DataModuleSchema),
    "model": Group(ModelSchema),
    "trainer": Group(TrainerSchema),
    "logger": Group(blocks=True),
    "callbacks": Group(blocks=True),
}
