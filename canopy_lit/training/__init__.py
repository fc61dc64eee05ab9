"""Training of the shared LoRA node encoder: typed batch, loss, decision-accuracy metric, LightningModule."""

from canopy_lit.data.batch import PreferenceBatch
from canopy_lit.training.losses import PairwiseRankingLoss, pair_costs, pairwise_ranking_loss
from canopy_lit.training.metrics import DecisionAccuracy, pairs_hold
from canopy_lit.training.module import NodeEncoderModule

__all__ = [
    "DecisionAccuracy",
    "NodeEncoderModule",
    "PairwiseRankingLoss",
    "PreferenceBatch",
    "pair_costs",
    "pairs_hold",
    "pairwise_ranking_loss",
]
