"""Pairwise ranking loss against hand-computed values (METHOD.md §1.2)."""

from __future__ import annotations

import math

import pytest
import torch

from canopy_lit.training.losses import PairwiseRankingLoss, pairwise_ranking_loss


def test_single_pair_matches_hand_value() -> None:
    # log(1 + exp(20 * (0.3 - 0.5))) = log(1 + e^-4)
    loss = pairwise_ranking_loss(torch.tensor([[0.5]]), torch.tensor([[0.3]]))
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-4.0)), rel=1e-5)


def test_sum_over_pairs_inside_log() -> None:
    win = torch.tensor([[0.5, 0.2, 0.9]])
    lose = torch.tensor([[0.3, 0.4, 0.9]])
    expected = math.log(1 + math.exp(20 * -0.2) + math.exp(20 * 0.2) + math.exp(0.0))
    assert pairwise_ranking_loss(win, lose).item() == pytest.approx(expected, rel=1e-5)


def test_scale_is_lambda() -> None:
    loss = pairwise_ranking_loss(torch.tensor([[0.1]]), torch.tensor([[0.2]]), scale=5.0)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(0.5)), rel=1e-6)
    assert PairwiseRankingLoss(5.0)(torch.tensor([[0.1]]), torch.tensor([[0.2]])).item() == pytest.approx(loss.item())


def test_mask_drops_padded_pairs_and_mean_is_per_instance() -> None:
    win = torch.tensor([[0.5, 0.0], [0.1, 0.7]])
    lose = torch.tensor([[0.3, 9.0], [0.2, 0.2]])  # 9.0 is padding: would dominate if not masked
    mask = torch.tensor([[True, False], [True, True]])
    first = math.log(1 + math.exp(-4.0))
    second = math.log(1 + math.exp(2.0) + math.exp(-10.0))
    per = pairwise_ranking_loss(win, lose, mask, reduction="none")
    assert per.tolist() == pytest.approx([first, second], rel=1e-5)
    assert pairwise_ranking_loss(win, lose, mask).item() == pytest.approx((first + second) / 2, rel=1e-5)
    assert pairwise_ranking_loss(win, lose, mask, reduction="sum").item() == pytest.approx(first + second, rel=1e-5)


def test_instance_without_pairs_costs_nothing() -> None:
    per = pairwise_ranking_loss(torch.zeros(1, 3), torch.ones(1, 3), torch.zeros(1, 3, dtype=torch.bool), reduction="none")
    assert per.item() == 0.0


def test_stable_for_large_margins_with_finite_gradients() -> None:
    win = torch.tensor([[-1.0, 1.0]], requires_grad=True)
    lose = torch.tensor([[1.0, -1.0]], requires_grad=True)
    loss = pairwise_ranking_loss(win, lose, scale=1000.0)  # exp(2000) overflows a naive sum
    assert loss.item() == pytest.approx(2000.0, rel=1e-6)
    loss.backward()
    assert torch.isfinite(win.grad).all() and win.grad[0, 0].item() == pytest.approx(-1000.0)


def test_gradient_pushes_winner_up() -> None:
    win = torch.tensor([[0.2]], requires_grad=True)
    lose = torch.tensor([[0.4]], requires_grad=True)
    pairwise_ranking_loss(win, lose).backward()
    assert win.grad.item() < 0 < lose.grad.item()


def test_bad_shapes_are_rejected() -> None:
    with pytest.raises(ValueError, match="score tensors"):
        pairwise_ranking_loss(torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="reduction"):
        pairwise_ranking_loss(torch.zeros(1, 1), torch.zeros(1, 1), reduction="max")


def test_margin_asks_winners_to_lead() -> None:
    """With m > 0 a winner that leads by less than m still costs more than log 2; m = 0 is the paper's loss."""
    win, lose = torch.tensor([[0.50]]), torch.tensor([[0.45]])
    base = pairwise_ranking_loss(win, lose, scale=20.0)
    with_margin = pairwise_ranking_loss(win, lose, scale=20.0, margin=0.1)
    assert with_margin > torch.log(torch.tensor(2.0)) > base
    assert torch.allclose(pairwise_ranking_loss(win, lose, scale=20.0, margin=0.0), base)


def test_instance_weights_give_a_weighted_mean() -> None:
    win = torch.tensor([[0.9], [0.1]])
    lose = torch.tensor([[0.1], [0.9]])
    per = pairwise_ranking_loss(win, lose, reduction="none")
    w = torch.tensor([1.0, 4.0])
    assert torch.allclose(pairwise_ranking_loss(win, lose, weight=w), (per * w).sum() / w.sum())
    assert torch.allclose(pairwise_ranking_loss(win, lose, weight=torch.ones(2)), per.mean())
    with pytest.raises(ValueError, match="weight"):
        pairwise_ranking_loss(win, lose, weight=torch.ones(3))


def test_pair_weights_count_a_pair_c_times_inside_the_log() -> None:
    """ℓ = log(1 + Σ c_k exp(x_k)): hand value, c = 1 is the paper's loss, padding still drops pairs."""
    win = torch.tensor([[0.5, 0.2, 0.0]])
    lose = torch.tensor([[0.3, 0.4, 0.0]])
    mask = torch.tensor([[True, True, False]])
    cost = torch.tensor([[4.0, 1.0, 7.0]])
    expected = math.log(1 + 4 * math.exp(20 * -0.2) + math.exp(20 * 0.2))
    assert pairwise_ranking_loss(win, lose, mask, pair_weight=cost).item() == pytest.approx(expected, rel=1e-5)
    ones = torch.ones_like(cost)
    assert pairwise_ranking_loss(win, lose, mask, pair_weight=ones).item() == pytest.approx(
        pairwise_ranking_loss(win, lose, mask).item(), rel=1e-6
    )
    # A heavier pair pulls harder on its own scores: its winner's gradient grows, the other pair's does not.
    w = win.clone().requires_grad_(True)
    pairwise_ranking_loss(w, lose, mask, pair_weight=cost).backward()
    w_plain = win.clone().requires_grad_(True)
    pairwise_ranking_loss(w_plain, lose, mask).backward()
    assert w.grad[0, 0].abs() > w_plain.grad[0, 0].abs()
    with pytest.raises(ValueError, match="pair_weight"):
        pairwise_ranking_loss(win, lose, mask, pair_weight=torch.zeros_like(cost))
    with pytest.raises(ValueError, match="pair_weight"):
        pairwise_ranking_loss(win, lose, mask, pair_weight=torch.ones(1, 2))
