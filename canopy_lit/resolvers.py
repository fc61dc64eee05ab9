"""OmegaConf resolvers the configs use; registered when ``canopy_lit`` is imported.

``${if_gpu:${trainer.accelerator},A,B}``: A when the trainer runs on a GPU, else B. Hardware-bound
settings (mixed precision, dataloader workers, pinned memory) follow the trainer chosen last, whatever
an experiment preset wrote, while an explicit ``key=value`` override still wins.
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


def register() -> None:
    if not OmegaConf.has_resolver("if_gpu"):
        OmegaConf.register_new_resolver("if_gpu", if_gpu)
