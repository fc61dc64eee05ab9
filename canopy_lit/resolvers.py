"""OmegaConf resolvers the configs use; registered when ``canopy_lit`` is imported.

``${if_gpu:${trainer.accelerator},A,B}``: A when the trainer runs on a GPU, else B. Hardware-bound
settings (mixed precision, dataloader workers, pinned memory) follow the trainer chosen last, whatever
an experiment preset wrote, while an explicit ``key=value`` override still wins.

``${config_groups:a,b,experiment=x|y}``: the named config groups with their options, one line each, for
a ``--help`` template (``group=x|y`` shows only those options of the group).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

GPU_ACCELERATORS = frozenset({"gpu", "cuda", "mps"})


def if_gpu(accelerator: Any, gpu_value: Any, cpu_value: Any) -> Any:
    """``gpu_value`` for a GPU accelerator (``auto``: when CUDA is available), else ``cpu_value``."""
    name = str(accelerator).lower()
    if name == "auto":
        import torch

        return gpu_value if torch.cuda.is_available() else cpu_value
    return gpu_value if name in GPU_ACCELERATORS else cpu_value


def config_groups(*specs: str) -> str:
    """``group: option, option`` lines for the named groups, options read from Hydra's config search path."""
    from hydra.core.global_hydra import GlobalHydra

    hydra = GlobalHydra.instance()
    if not hydra.is_initialized():  # the config resolved outside a Hydra app (tests, tools): no search path
        return ""
    loader = hydra.config_loader()
    lines = []
    for spec in specs:
        group, _, only = str(spec).partition("=")
        options = loader.get_group_options(group)
        if only:
            options = [o for o in options if o in only.split("|")]
        if options:
            lines.append(f"{group}: {', '.join(options)}")
    return "\n".join(lines)


def register() -> None:
    if not OmegaConf.has_resolver("if_gpu"):
        OmegaConf.register_new_resolver("if_gpu", if_gpu)
    if not OmegaConf.has_resolver("config_groups"):
        OmegaConf.register_new_resolver("config_groups", config_groups)
