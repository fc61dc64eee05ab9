from canopy_lit.training.losses.pairwise_ranking import PairwiseRankingLoss, pair_costs, pairwise_ranking_loss

__all__ = ["PairwiseRankingLoss", "pair_costs", "pairwise_ranking_loss"]
