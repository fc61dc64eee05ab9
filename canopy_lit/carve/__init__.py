"""CARVE: clip-adaptive reranking of video evidence, with V-RAGBench-style stage metrics (METHOD.md §2).

Stages, one module each:

- ``representations``: clips (30-s video leaves) under four configurations {visual, text} x {frame, clip}
- ``retrieve``: stage 1, one retriever per configuration, one shared candidate pool
- ``rerank``: stage 2, a cross-encoder rescoring each candidate under its retrieving configurations
- ``generate``: each top-k clip to the reader in its winning configuration's representation
- ``baselines``: single configurations, reciprocal rank fusion
- ``metrics``: retrieval recall@k against the evidence clip, top-1 temporal IoU, answer accuracy
- ``pipeline``: ``CarvePipeline``, the run folder and its construction from config (``run(cfg)``, the
  runner of ``method=carve``); CLI ``python -m canopy_lit.carve run|compare ...``
"""

from __future__ import annotations

from canopy_lit.carve.baselines import reciprocal_rank_fusion, single_config_ranking
from canopy_lit.carve.generate import CarveReader, EvidenceBlock, evidence_blocks, winner_distribution
from canopy_lit.carve.metrics import Window, is_hit, recall_at_k, stage_metrics, temporal_iou, top1_tiou
from canopy_lit.carve.pipeline import (
    CarvePipeline,
    SharedModels,
    build_corpus,
    build_pipeline,
    parse_method,
    run_methods,
)
from canopy_lit.carve.representations import (
    CONFIGS,
    CaptionSummariser,
    Clip,
    ClipCorpus,
    ConfigView,
    DescribedFrameEmbedder,
    DescriberSummariser,
    EncoderVisualEmbedder,
    LLMSummariser,
    Summariser,
    VisualEmbedder,
    video_clips,
)
from canopy_lit.carve.rerank import (
    CandidateRepr,
    ClipAdaptiveReranker,
    ConfigScore,
    CrossEncoder,
    EmbeddingCrossEncoder,
    LLMYesNoCrossEncoder,
    RankedClip,
    normalise,
    rank_clips,
)
from canopy_lit.carve.retrieve import Candidate, Hit, ParallelRetriever, build_pool, retrieve_config

__all__ = [
    "CONFIGS", "Candidate", "CandidateRepr", "CaptionSummariser", "CarvePipeline", "CarveReader",
    "Clip", "ClipAdaptiveReranker", "ClipCorpus", "ConfigScore", "ConfigView", "CrossEncoder",
    "DescribedFrameEmbedder", "DescriberSummariser", "EmbeddingCrossEncoder", "EncoderVisualEmbedder",
    "EvidenceBlock", "Hit", "LLMSummariser", "LLMYesNoCrossEncoder", "ParallelRetriever", "RankedClip",
    "SharedModels", "Summariser", "VisualEmbedder", "Window", "build_corpus", "build_pipeline", "build_pool",
    "evidence_blocks", "is_hit",
    "normalise", "parse_method", "rank_clips", "recall_at_k", "reciprocal_rank_fusion", "retrieve_config",
    "run_methods", "single_config_ranking", "stage_metrics", "temporal_iou", "top1_tiou", "video_clips",
    "winner_distribution",
]  # fmt: skip
