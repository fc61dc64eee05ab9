"""``model.optimizer`` and ``model.scheduler`` are ``_partial_`` blocks (lightning-hydra-template's shape): any
``torch.optim`` class or schedule factory is a config change, the ranges are still checked before any work, and the
shipped schedule keeps the rates the flat ``model.lr`` / ``model.schedule`` knobs gave."""

from __future__ import annotations

import math

import pytest
import torch
from hydra import compose
from hydra.utils import instantiate

from canopy_lit.schema import ConfigError, validate_train_config
from canopy_lit.training.schedules import warmup_schedule


def _problems(*overrides: str) -> list[str]:
    try:
        validate_train_config(compose("train", overrides=["experiment=quickstart", *overrides]))
    except ConfigError as err:
        return err.problems
    return []


def _rates(decay: str, total: int, warmup_ratio: float, floor: float = 0.0) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = warmup_schedule(opt, total, warmup_ratio=warmup_ratio, decay=decay, min_lr_ratio=floor)
    rates = []
    for _ in range(total):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


def test_the_quickstart_blocks_build_adamw_and_the_warmup_schedule(hydra_ctx) -> None:
    cfg = compose("train", overrides=["experiment=quickstart"])
    make_opt, make_sched = instantiate(cfg.model.optimizer), instantiate(cfg.model.scheduler)
    opt = make_opt([torch.nn.Parameter(torch.zeros(2))])
    assert type(opt) is torch.optim.AdamW and opt.defaults["lr"] == 1e-3 and opt.defaults["weight_decay"] == 0.0
    sched = make_sched(opt, total_steps=40)  # 5% warm-up of 40 steps: 2 warm steps at 1/3 and 2/3 of the peak
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 / 3)
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(2e-3 / 3)


def test_warmup_schedule_gives_the_rates_of_the_former_flat_knobs() -> None:
    """Pinned against the closed form the module used before the blocks (warm-up (s+1)/(W+1), then decay)."""
    total, warm = 20, 4  # warmup_ratio 0.2
    for decay in ("constant", "linear", "cosine"):
        rates = _rates(decay, total, 0.2, floor=0.1)
        for step, rate in enumerate(rates):
            if step < warm:
                want = (step + 1) / (warm + 1)
            elif decay == "constant":
                want = 1.0
            else:
                frac = (step - warm) / (total - warm)
                shape = 1.0 - frac if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))
                want = 0.1 + 0.9 * shape
            assert rate == pytest.approx(2.0 * want), (decay, step)


def test_another_optimizer_or_no_schedule_is_a_config_change(hydra_ctx) -> None:
    from canopy_lit.encoders import TextEncoder
    from canopy_lit.training import NodeEncoderModule

    sgd = ["model.optimizer._target_=torch.optim.SGD", "+model.optimizer.momentum=0.9", "model.scheduler=null"]
    assert _problems(*sgd) == []
    cfg = compose("train", overrides=["experiment=quickstart", *sgd])
    module = NodeEncoderModule(
        TextEncoder("minilm", max_seq_length=32), optimizer=instantiate(cfg.model.optimizer), scheduler=None,
        lora_target_modules=["query", "value"], lora_layers=[5],
    )  # fmt: skip
    opt = module.configure_optimizers()  # no scheduler: the optimizer alone, its rate constant
    assert type(opt) is torch.optim.SGD and opt.defaults["momentum"] == 0.9 and opt.defaults["lr"] == 1e-3
    assert {id(p) for g in opt.param_groups for p in g["params"]} == {
        id(p) for p in module.parameters() if p.requires_grad
    }  # only the LoRA parameters


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.optimizer.lr=0", "model.optimizer.lr must be a number > 0, got 0"),
        ("model.optimizer.weight_decay=-0.1", "model.optimizer.weight_decay must be a number >= 0, got -0.1"),
        ("model.scheduler.warmup_ratio=1", "model.scheduler.warmup_ratio must be a number >= 0 and < 1, got 1"),
        ("+model.optimizer.momentum=0.9", "unknown config key model.optimizer.momentum (torch.optim.AdamW takes no such"),
    ],
)
def test_the_blocks_keep_their_ranges_and_keys_checked(hydra_ctx, override: str, message: str) -> None:
    problems = _problems(override)
    assert len(problems) == 1 and problems[0].startswith(message), problems
