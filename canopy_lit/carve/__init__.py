"""CARVE: clip-adaptive reranking of video evidence, with V-RAGBench-style stage metrics (METHOD.md §2).

Stages, one module each:

- ``representations``: clips (30-s video leaves) under four configurations {visual, text} x {frame, clip}
- ``retrieve``: stage 1, one retriever per configuration, one shared candidate pool
- ``rerank``: stage 2, a cross-encoder rescoring each candidate under its retrieving configurations
  (``ClipAdaptiveReranker``, CARVE's ranking; normalisations ``ZScore`` / ``MinMax`` / ``NoNormalisation``)
- ``baselines``: single configurations, reciprocal rank fusion (the other rankings of ``carve/method``)
- ``generate``: each top-k clip to the reader in its winning configuration's representation
- ``metrics``: retrieval recall@k against the evidence clip, top-1 temporal IoU, answer accuracy
- ``stages``: ``CarvePipeline``, one question through stage 1, the method's ranking and the reader

Runs over question lists go through the shared harness in ``canopy_lit.eval.carve`` (``run(cfg)``, the
runner of ``method=carve``, beside the other modes' runners: it needs the composition root, which builds
this package's parts, so it cannot live in it); CLI ``python -m canopy_lit.carve run|compare ...``.

Every part is built from config by ``canopy_lit.carve.build`` (``CarveParts``, ``build_carve_*``), CARVE's composition root.
"""

from __future__ import annotations

from canopy_lit.carve.baselines import (
    FusionRanking,
    SingleConfigRanking,
    fused_ranking,
    single_config_ranking,
)
from canopy_lit.carve.generate import CarveReader, EvidenceBlock, evidence_blocks, winner_distribution
from canopy_lit.carve.metrics import Window, is_hit, recall_at_k, stage_metrics, temporal_iou, top1_tiou
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
    ClipRanking,
    ConfigScore,
    CrossEncoder,
    EmbeddingCrossEncoder,
    LLMYesNoCrossEncoder,
    MinMax,
    NoNormalisation,
    Normalisation,
    RankedClip,
    ZScore,
    rank_clips,
)
from canopy_lit.carve.retrieve import Candidate, Hit, ParallelRetriever, build_pool, retrieve_config
from canopy_lit.carve.stages import CarvePipeline, question_window

__all__ = [
    "CONFIGS", "Candidate", "CandidateRepr", "CaptionSummariser", "CarvePipeline", "CarveReader",
    "Clip", "ClipAdaptiveReranker", "ClipCorpus", "ClipRanking", "ConfigScore", "ConfigView", "CrossEncoder",
    "DescribedFrameEmbedder", "DescriberSummariser", "EmbeddingCrossEncoder", "EncoderVisualEmbedder",
    "EvidenceBlock", "FusionRanking", "Hit", "LLMSummariser", "LLMYesNoCrossEncoder", "MinMax", "NoNormalisation",
    "Normalisation", "ParallelRetriever", "RankedClip", "SingleConfigRanking", "Summariser", "VisualEmbedder",
    "Window", "ZScore", "build_pool", "evidence_blocks", "fused_ranking", "is_hit", "question_window",
    "rank_clips", "recall_at_k", "retrieve_config", "single_config_ranking", "stage_metrics", "temporal_iou",
    "top1_tiou", "video_clips", "winner_distribution",
]  # fmt: skip
