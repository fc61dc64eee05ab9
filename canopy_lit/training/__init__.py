"""Training of the shared LoRA node encoder: loss, decision-accuracy metric, LightningModule."""

from canopy_lit.training.losses import PairwiseRankingLoss, pairwise_ranking_loss
from canopy_lit.training.metrics import DecisionAccuracy, pairs_hold
from canopy_lit.training.module import NodeEncoderModule

__all__ = ["DecisionAccuracy", "NodeEncoderModule", "PairwiseRankingLoss", "pairs_hold", "pairwise_ranking_loss"]
