"""The keys no constructor takes, typed and ranged as dataclasses: the top-level knobs of evaluate.py and train.py,
the groups read key by key (``loop``, ``judge``, ``method``, ...) and the pipeline's keys beside a target's
arguments. A range is written as a constructor writes it: ``Annotated[int, Ge(1)]``, ``Literal[...]``.

Every other key is an argument of the group's ``_target_``, typed and ranged by that constructor's signature.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Interval

USAGE_ERROR = 2  # exit status of a config error (argparse's convention)
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
MISSING = object()


Resume = Literal["auto", "force"]
Count = Annotated[int, Ge(1)]


def also(default: Any, *values: Any) -> Any:
    """A field that also takes ``values`` outside its range (Lightning's -1 = "no limit")."""
    return field(default=default, metadata={"also": values})


# --------------------------------------------------------------------------- evaluate.py


@dataclass
class EvalSchema:
    """Top-level knobs of ``configs/evaluate.yaml`` and its presets."""

    task_name: str = "evaluate"
    mode: str = "qa"  # a key of ``modes`` (checked with them: canopy_lit.schema.check)
    limit: Count | None = None
    seed: int = 0
    concurrency: Count = 1
    threads: Count | None = None
    retry_failed: bool = False
    progress: bool = True
    print_config: bool = True  # the composed config tree at start (canopy_lit.config_tree)
    max_consecutive_failures: Annotated[int, Ge(0)] = 5
    resume: Resume = "auto"  # canopy_lit.evaluate.claim_run_folder
    shard: Any = None  # "I/N": one of N parts of the questions (checked by canopy_lit.data.shards)
    study: str | None = None  # the ablation preset's name (sweep folder, report grouping)
    adapter: str | None = None  # an ablation's fθ folder, interpolated into encoder.adapter


@dataclass
class LoopSchema:
    """``loop.*``: the critic loop (METHOD.md §1.1); the R minimum depends on the method."""

    max_rounds: Count = 3
    reader_max_tokens: Count = 16000
    aggregation_check: bool = True
    batched: bool = False
    max_batch: Count | None = None


@dataclass
class JudgeSchema:
    """``judge.*``: the LLM-as-judge after a QA run (``canopy_lit.pipeline.build.build_judge``)."""

    enabled: bool = False
    max_tokens: Count = 16
    logprobs: Annotated[int, Ge(0)] = 5


@dataclass
class RetrievalSchema:
    """``retrieval.*`` keys that are no index builder's argument (the builder's come from its ``_target_``):
    the loop owns ``k`` and ``exclude_seen``, the pipeline reads the node cache and the candidate ranking."""

    k: Count = 10
    # how retriever=candidates/benchmark ranks a question's items: a CandidateRanking block (each option sets it)
    candidate_ranking: dict[str, Any] | None = None
    exclude_seen: bool = False
    node_cache_dir: str | None = None

@dataclass
class RetrieverSchema:
    """``retriever.*`` beside its factory's arguments: the option's label in tables and run folders."""

    name: str = "corpus"


@dataclass
class MethodSchema:
    """``method.*``: its name (tables) and its runner, a ``_target_`` block of ``run(cfg) -> dict[str, float]``
    with ``_partial_: true`` (default: the CANOPY evidence loop; CARVE names its own pipeline). The stages
    it uses are group choices in its defaults list (``refine``, ``controller`` ...)."""

    name: str = "canopy"
    label: str | None = None
    runner: dict[str, Any] | None = None
    # false for a method that never retrieves (the reader alone): retrieval.k may be 0, loop.max_rounds must be
    retrieves: bool = True


@dataclass
class EvidenceSchema:
    """``evidence.*`` (experiment=evidence): the reader tokenizer evidence tokens are counted in."""

    tokenizer: str | None = None


@dataclass
class RetrievalEvalSchema:
    """``retrieval_eval.*`` (experiment=retrieval)."""

    benchmarks: list[str] = field(default_factory=list)
    ks: list[int] = field(default_factory=list)
    split: Literal["train", "val", "test", "all"] = "all"


@dataclass
class CarveSchema:
    """``carve.*`` keys beside ``CarvePipeline``'s arguments (method=carve); the ``carve/*`` groups' blocks are
    checked by their own targets (``carve.method``: a ``ClipRanking``)."""

    rrf_k: Annotated[float, Ge(0)] = 60.0  # interpolated into carve/method=rrf
    frame_units: Literal["all", "best"] = "all"  # interpolated into carve/method=carve
    generate: bool = True
    clips: dict[str, Any] | None = None
    describer: dict[str, Any] | None = None
    visual_encoder: dict[str, Any] | None = None
    summariser: dict[str, Any] | None = None
    reranker: dict[str, Any] | None = None
    normalisation: dict[str, Any] | None = None


# --------------------------------------------------------------------------- train.py


@dataclass
class TrainSchema:
    task_name: str = "train"
    seed: Annotated[int, Interval(ge=0, le=2**32 - 1)] = 0  # the range Lightning's seed_everything (numpy) accepts
    ckpt_path: str | None = None
    # a finished run (metrics.json written) is not resumed unless force
    resume: Resume = "auto"
    # train=false: no fit, no adapter; the test pass of the untrained model (model.test_scorers=[f0])
    train: bool = True
    test: bool = True
    threads: Count | None = None
    test_threads: Count | None = None
    print_config: bool = True  # the composed config tree at start (canopy_lit.config_tree)
    # what train.py returns to Hydra sweepers: the best or the last validation score, never a test score
    optimized_metric: Literal["val/best_decision_accuracy", "val/decision_accuracy"] = "val/best_decision_accuracy"


@dataclass
class BenchmarkOptionsSchema:
    """``datamodule.options.<benchmark>``: ``load_benchmark``'s path and options, plus a per-split cap."""

    path: str | None = None
    max_questions: Count | dict[str, int | None] | None = None


@dataclass
class OptimizerSchema:
    """Ranges of a ``torch.optim`` optimizer's knobs in ``model.optimizer`` (its signature types them; torch's
    classes cannot carry our ranges)."""

    lr: Annotated[float, Gt(0)] = 5e-5
    weight_decay: Annotated[float, Ge(0)] = 0.0


@dataclass
class TrainerSchema:
    """Ranges of the Lightning Trainer's knobs the presets set (its signature types them; a class we do not own
    cannot carry our ranges); -1 means "no limit" for epochs and steps."""

    max_epochs: Count | None = also(2, -1)
    min_epochs: Annotated[int, Ge(0)] | None = None
    max_steps: Count = also(-1, -1)
    log_every_n_steps: Count = 10
    accumulate_grad_batches: Count = 1
    check_val_every_n_epoch: Count | None = 1
    # an int counts training batches, a float is a share of an epoch, a string is a duration
    val_check_interval: Annotated[int | float, Gt(0)] | str | None = None
    num_sanity_val_steps: Annotated[int, Ge(-1)] = 0
    gradient_clip_val: Annotated[float, Ge(0)] | None = None
    limit_train_batches: Annotated[float, Ge(0)] | None = None
    limit_val_batches: Annotated[float, Ge(0)] | None = None
    limit_test_batches: Annotated[float, Ge(0)] | None = None
    # machines, and processes per machine (a count, -1 = every GPU, "auto", or GPU indices); on SLURM both
    # come from the allocation (scripts/slurm/train_multinode.sbatch); checked with the launcher below
    num_nodes: Count = 1
    devices: Count | str | list[int] = also(1, -1)
