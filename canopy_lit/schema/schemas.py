"""The keys of the groups read key by key (``loop``, ``judge``, ``critic``, ...), typed and ranged as dataclasses;
for a ``_target_`` group their fields refine the types its signature gives (``knob(default, ge=1)``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USAGE_ERROR = 2  # exit status of a config error (argparse's convention)
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
MISSING = object()


def knob(default: Any = None, **rule: Any) -> Any:
    """A schema field; ``rule`` keys: ``ge``, ``gt``, ``le``, ``lt``, ``choices``, ``also`` (extra allowed values)."""
    return field(default=default, metadata=rule)


# --------------------------------------------------------------------------- evaluate.py


@dataclass
class EvalSchema:
    """Top-level knobs of ``configs/evaluate.yaml`` and its presets."""

    task_name: str = "evaluate"
    mode: str = knob("qa", choices=("qa", "probe", "evidence", "retrieval"))
    limit: int | None = knob(None, ge=1)
    seed: int = 0
    concurrency: int = knob(1, ge=1)
    threads: int | None = knob(None, ge=1)
    retry_failed: bool = False
    progress: bool = True
    print_config: bool = True  # the composed config tree at start (canopy_lit.config_tree)
    max_consecutive_failures: int = knob(5, ge=0)
    resume: str = knob("auto", choices=("auto", "force"))  # canopy_lit.evaluate.claim_run_folder
    shard: Any = None  # "I/N": one of N parts of the questions (checked by canopy_lit.data.shards)
    study: str | None = None  # the ablation preset's name (sweep folder, report grouping)
    adapter: str | None = None  # an ablation's fθ folder, interpolated into encoder.adapter


@dataclass
class LoopSchema:
    """``loop.*``: the critic loop (METHOD.md §1.1); the R minimum depends on the method."""

    max_rounds: int = knob(3, ge=1)
    reader_max_tokens: int = knob(16000, ge=1)
    aggregation_check: bool = True
    batched: bool = False
    max_batch: int | None = knob(None, ge=1)


@dataclass
class JudgeSchema:
    """``judge.*``: the LLM-as-judge after a QA run (``canopy_lit.pipeline.build.build_judge``)."""

    enabled: bool = False
    max_tokens: int = knob(16, ge=1)
    logprobs: int = knob(5, ge=0)


@dataclass
class RetrievalSchema:
    """Ranges of ``retrieval.*`` keys; which keys a variant takes comes from its ``_target_`` (plus the
    pipeline's keys, ``PIPELINE_RETRIEVAL_KEYS``)."""

    k: int = knob(10, ge=1)
    # how retriever=candidates/benchmark ranks a question's items: a CandidateRanking block (each option sets it)
    candidate_ranking: dict[str, Any] | None = None
    exclude_seen: bool = False
    node_cache_dir: str | None = None
    index: str = knob("flat_sq_fp16", choices=("flat_sq_fp16", "flat", "ivfpq"))
    batch_size: int = knob(64, ge=1)
    shard_size: int = knob(4096, ge=1)
    partition_by_modality: bool = True
    routing: bool = False
    # hybrid (RRF of dense and BM25): 1-based ranks, so rrf_k = 0 is still defined
    rrf_k: int = knob(60, ge=0)
    depth: int = knob(100, ge=1)
    # bm25 (also the hybrid's retrieval.bm25 block)
    k1: float = knob(1.5, ge=0)
    b: float = knob(0.75, ge=0, le=1)
    method: str = knob("lucene", choices=("lucene", "robertson", "atire", "bm25l", "bm25+"))
    n_threads: int = knob(1, ge=0)


@dataclass
class IndexOptionsSchema:
    """Ranges of ``retrieval.index_options`` (the keyword arguments of ``FaissIndex``)."""

    nlist: int = knob(4096, ge=1)
    pq_m: int = knob(64, ge=1)
    pq_nbits: int = knob(8, ge=1, le=16)
    nprobe: int = knob(64, ge=1)
    search_batch: int = knob(1024, ge=1)


@dataclass
class EncoderSchema:
    """Ranges of ``encoder.*``; its keys are the arguments of its ``_target_``, an encoder class."""

    adapter_scale: float = 1.0
    max_seq_length: int | None = knob(512, ge=1)
    max_batch_tokens: int | None = knob(2048, ge=1)
    max_frames_per_node: int | None = knob(8, ge=1)
    batch_size: int = knob(64, ge=1)
    max_pixels: int = knob(1003520, ge=1)
    pooling: str | None = knob(None, choices=("mean", "cls"))
    node_pooling: str = knob("node", choices=("node", "late", "late_region", "cross"))


@dataclass
class DataSchema:
    """Ranges of ``data.*``, the arguments of ``load_split`` (``data.options``: the benchmark reader's)."""

    split: str = knob("test", choices=("train", "val", "test", "all"))
    seed: int = 0


@dataclass
class RetrieverSchema:
    """``retriever.*`` beside its factory's arguments: the option's label in tables and run folders."""

    name: str = "corpus"


@dataclass
class CriticSchema:
    mode: str = knob("logprob", choices=("logprob", "json"))
    threshold: float | None = knob(None, ge=0.0, le=1.0)


@dataclass
class ReaderSchema:
    max_tokens: int = knob(32, ge=1)


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
    split: str = knob("all", choices=("train", "val", "test", "all"))


@dataclass
class CarveSchema:
    """Ranges of ``carve.*`` (method=carve); its other keys are ``CarvePipeline``'s, and the ``carve/*``
    groups' blocks are checked by their own targets (``carve.method``: a ``ClipRanking``)."""

    k: int = knob(3, ge=1)
    pool_k: int = knob(3, ge=1)
    min_iou: float = knob(0.0, ge=0, le=1)
    rrf_k: float = knob(60.0, ge=0)  # interpolated into carve/method=rrf
    frame_units: str = knob("all", choices=("all", "best"))  # interpolated into carve/method=carve
    workers: int = knob(4, ge=1)
    scope: str = knob("corpus", choices=("corpus", "video"))
    generate: bool = True
    clips: dict[str, Any] | None = None
    describer: dict[str, Any] | None = None
    visual_encoder: dict[str, Any] | None = None
    summariser: dict[str, Any] | None = None
    reranker: dict[str, Any] | None = None
    normalisation: dict[str, Any] | None = None


@dataclass
class TreeSchema:
    branching: int = knob(2, ge=2)


@dataclass
class RefineSchema:
    m: int = knob(10, ge=1)
    lazy: bool = True
    descend_margin: float = knob(0.0, ge=-1.0, le=1.0)  # δ on cosine scores: |δ| > 1 is a typo, not a setting
    item_margin: float | None = knob(None, ge=0.0, le=2.0)  # on cosine scores: a gap over 2 never drops anything
    rate: float = knob(0.55, gt=0.0, le=1.0)  # LongLLMLingua's target share of tokens


@dataclass
class LLMSchema:
    """Ranges of backend knobs; which keys a backend takes comes from its class (``_target_``)."""

    n_ctx: int = knob(4096, ge=1)
    n_threads: int | None = knob(None, ge=1)
    n_parallel: int = knob(1, ge=1)
    n_batch: int = knob(512, ge=1)
    timeout: float = knob(60.0, gt=0)
    max_retries: int = knob(4, ge=0)
    max_concurrency: int = knob(8, ge=1)
    tensor_parallel_size: int = knob(1, ge=1)
    gpu_memory_utilization: float = knob(0.85, gt=0, le=1)
    max_model_len: int | None = knob(16384, ge=1)
    multimodal: bool = False


# --------------------------------------------------------------------------- train.py


@dataclass
class TrainSchema:
    task_name: str = "train"
    seed: int = knob(0, ge=0, le=2**32 - 1)  # the range Lightning's seed_everything (numpy) accepts
    ckpt_path: str | None = None
    # a finished run (metrics.json written) is not resumed unless force
    resume: str = knob("auto", choices=("auto", "force"))
    # train=false: no fit, no adapter; the test pass of the untrained model (model.test_scorers=[f0])
    train: bool = True
    test: bool = True
    threads: int | None = knob(None, ge=1)
    test_threads: int | None = knob(None, ge=1)
    print_config: bool = True  # the composed config tree at start (canopy_lit.config_tree)
    # what train.py returns to Hydra sweepers: the best or the last validation score, never a test score
    optimized_metric: str = knob("val/best_decision_accuracy", choices=("val/best_decision_accuracy", "val/decision_accuracy"))


@dataclass
class DataModuleSchema:
    batch_size: int = knob(16, ge=1)
    num_workers: int = knob(0, ge=0)
    branching: int = knob(2, ge=2)
    val_fraction: float = knob(0.1, ge=0, lt=1)
    group_by_item: bool = False
    hard_negatives: int = knob(0, ge=0)
    pin_memory: bool = False
    persistent_workers: bool = False


@dataclass
class BenchmarkOptionsSchema:
    """``datamodule.options.<benchmark>``: ``load_benchmark``'s path and options, plus a per-split cap."""

    path: str | None = None
    max_questions: int | dict[str, int | None] | None = knob(None, ge=1)


@dataclass
class ModelSchema:
    lr: float = knob(5e-5, gt=0)
    weight_decay: float = knob(0.0, ge=0)
    warmup_ratio: float = knob(0.0, ge=0, lt=1)
    schedule: str = knob("constant", choices=("constant", "linear", "cosine"))
    min_lr_ratio: float = knob(0.0, ge=0, le=1)
    lora_r: int = knob(8, ge=1)
    lora_alpha: float = knob(16, gt=0)
    lora_dropout: float = knob(0.05, ge=0, lt=1)
    scale: float = knob(20.0, gt=0)
    margin: float = knob(0.0, ge=0)
    stop_weight: float = knob(1.0, gt=0)
    gold_child_weight: float = knob(1.0, gt=0)
    gold_sibling_weight: float = knob(1.0, gt=0)
    chunk_size: int = knob(16, ge=1)
    backbone_dropout: bool = True
    test_scorers: list[str] = field(default_factory=lambda: ["ftheta", "f0"])


@dataclass
class TrainerSchema:
    """The Lightning Trainer knobs the presets set; -1 means "no limit" for epochs and steps."""

    max_epochs: int | None = knob(2, ge=1, also=(-1,))
    min_epochs: int | None = knob(None, ge=0)
    max_steps: int = knob(-1, ge=1, also=(-1,))
    log_every_n_steps: int = knob(10, ge=1)
    accumulate_grad_batches: int = knob(1, ge=1)
    check_val_every_n_epoch: int | None = knob(1, ge=1)
    # an int counts training batches, a float is a share of an epoch, a string is a duration
    val_check_interval: int | float | str | None = knob(None, gt=0)
    num_sanity_val_steps: int = knob(0, ge=-1)
    gradient_clip_val: float | None = knob(None, ge=0)
    limit_train_batches: float | None = knob(None, ge=0)
    limit_val_batches: float | None = knob(None, ge=0)
    limit_test_batches: float | None = knob(None, ge=0)
    # machines, and processes per machine (a count, -1 = every GPU, "auto", or GPU indices); on SLURM both
    # come from the allocation (scripts/slurm/train_multinode.sbatch); checked with the launcher below
    num_nodes: int = knob(1, ge=1)
    devices: int | str | list[int] = knob(1, ge=1, also=(-1,))
