from canopy_lit.training.losses.pairwise_ranking import PairwiseRankingLoss, pairwise_ranking_loss

__all__ = ["PairwiseRankingLoss", "pairwise_ranking_loss"]
