"""How each config node of evaluate.py and train.py is checked (``Group``): its schema, its targets, extra keys."""

from __future__ import annotations

from dataclasses import dataclass

from canopy_lit.schema.schemas import (
    CarveSchema,
    EvidenceSchema,
    JudgeSchema,
    LoopSchema,
    MethodSchema,
    RetrievalEvalSchema,
    RetrievalSchema,
    RetrieverSchema,
    TrainerSchema,
)

# --------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class Group:
    """How one config node is checked.

    A node's keys are the keyword arguments of its ``_target_`` (or of ``targets``), typed and ranged by their
    signatures (``Annotated[int, Ge(1)]``, ``Literal[...]``): the constructor owns its knobs. A ``schema``
    declares only what no constructor takes: the keys of a node read key by key, and ``extra`` keys the
    pipeline reads beside a target's arguments.

    Attributes:
        schema: a dataclass. Without targets its fields are the node's keys; with them, the ``extra`` keys' types.
        targets: callables (dotted paths) whose keyword arguments are the node's keys, besides the
            node's own ``_target_``.
        extra: keys read by the pipeline beside the targets' arguments (typed by ``schema``).
        passed: arguments of the targets that the builder passes itself: never config keys.
        blocks: a node of named ``_target_`` blocks (``logger``, ``callbacks``), each checked by its target.
    """

    schema: type | None = None
    targets: tuple[str, ...] = ()
    extra: frozenset[str] = frozenset()
    passed: frozenset[str] = frozenset()
    blocks: bool = False


# Keys of the retrieval group that are no index builder's arguments: the loop owns k and exclude_seen,
# the node cache and the candidate ranking are read by the pipeline.
PIPELINE_RETRIEVAL_KEYS = frozenset({"k", "exclude_seen", "node_cache_dir", "candidate_ranking"})
_UNCHECKED = None  # a group whose values are paths or Hydra's own settings

EVAL_GROUPS: dict[str, Group | None] = {
    "paths": _UNCHECKED,
    "hydra": _UNCHECKED,
    "modes": Group(blocks=True),  # each mode's runner, a _target_ block (canopy_lit.eval.modes)
    "method": Group(MethodSchema),
    "loop": Group(LoopSchema),
    "retrieval": Group(RetrievalSchema, extra=PIPELINE_RETRIEVAL_KEYS),
    "retriever": Group(RetrieverSchema, extra=frozenset({"name"})),
    "controller": Group(),
    # read by build.py into the critic controller and the LLM reader: their constructors' arguments
    "critic": Group(targets=("canopy_lit.control.critic.critic_controller",), passed=frozenset({"llm"})),
    "reader": Group(targets=("canopy_lit.reader.llm_reader.LLMReader",), passed=frozenset({"llm", "stats"})),
    "tree": Group(),
    "refine": Group(),
    "scorer": Group(),  # the encoder view nodes are scored through (canopy_lit.scoring.scorers.node_scorer)
    "llm": Group(),
    "judge": Group(JudgeSchema),
    "logger": Group(blocks=True),  # logger=wandb: the run mirrored to W&B (canopy_lit.tracking.log_evaluation)
    "encoder": Group(),
    "data": Group(targets=("canopy_lit.data.splits.load_split",)),
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
    "tree": Group(),
    "encoder": Group(),
    "datamodule": Group(),
    "model": Group(),
    # Lightning's Trainer: its signature types the keys, TrainerSchema the ranges (a class we cannot annotate)
    "trainer": Group(TrainerSchema),
    "logger": Group(blocks=True),
    "callbacks": Group(blocks=True),
}
