"""The composed config as a tree on the console when a run starts (``print_config=false`` turns it off).

Printed after validation, so a refused config prints its one-line errors only. Secrets are redacted
(``canopy_lit.redaction``) before anything is shown.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console
from rich.syntax import Syntax
from rich.tree import Tree

from canopy_lit.redaction import redact_config

# Groups shown first, in the order a run uses them; every other top-level key follows in config order.
TRAIN_ORDER = ("data", "datamodule", "encoder", "model", "trainer", "callbacks", "logger", "tree")
EVAL_ORDER = ("mode", "method", "data", "retriever", "retrieval", "encoder", "tree", "scorer", "refine", "controller", "llm", "loop")


def config_tree(cfg: DictConfig, order: Sequence[str] = ()) -> Tree:
    """A rich ``Tree``: one branch per top-level group (``order`` first), its resolved YAML inside.

    ``hydra`` and ``paths`` are left out: where the run writes is printed as its run folder.
    """
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException:  # an interpolation that needs Hydra's runtime (a config composed outside a run): as written
        resolved = OmegaConf.to_container(cfg, resolve=False)
    plain: dict[str, Any] = redact_config(resolved)
    keys = [k for k in order if k in plain] + [k for k in plain if k not in order and k not in ("hydra", "paths")]
    tree = Tree("config", guide_style="dim")
    scalars = {k: plain[k] for k in keys if not isinstance(plain[k], (dict, list))}
    for key in keys:
        if key in scalars:
            continue
        text = yaml.safe_dump(plain[key], sort_keys=False, allow_unicode=True).rstrip()
        tree.add(key).add(Syntax(text, "yaml", theme="ansi_dark", background_color="default"))
    if scalars:
        text = yaml.safe_dump(scalars, sort_keys=False, allow_unicode=True).rstrip()
        tree.add("(top level)").add(Syntax(text, "yaml", theme="ansi_dark", background_color="default"))
    return tree


def print_config_tree(cfg: DictConfig, order: Sequence[str] = (), console: Console | None = None) -> None:
    """Print :func:`config_tree` unless ``cfg.print_config`` is false (and on the first process only: the
    other DDP ranks and nodes start the same script)."""
    first = all(os.environ.get(v, "0") == "0" for v in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))
    if cfg.get("print_config", True) and first:
        (console or Console()).print(config_tree(cfg, order))
