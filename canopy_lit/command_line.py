"""The command line of ``train.py`` and ``evaluate.py`` before Hydra runs it: a mistyped key or group option is
one line and exit 2, with a suggestion, instead of Hydra's multi-line composition error and exit 1.

    $ python evaluate.py data.nmae=x
    evaluate.py: error: unknown config key data.nmae (did you mean data.name?); a new key is added as +data.nmae=...

The overrides are composed once (~0.1 s) the way Hydra will compose them. Only composition errors about the
overrides themselves are reported here; a multirun (``-m``), Hydra's flags (``--help``, ``--cfg``) and every other
problem are left to Hydra and to the config schema (``canopy_lit.schema``), which reports bad values.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any

from canopy_lit.schema import CONFIG_DIR, USAGE_ERROR, unknown_key


def _compose(config_name: str, overrides: Sequence[str]) -> Any:  # a DictConfig (hydra imported lazily)
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name, overrides=list(overrides), return_hydra_config=True)


def _key_of(override: str) -> str:
    return override.split("=", 1)[0].lstrip("~+")


def _unknown_key(key: str, config_name: str, overrides: Sequence[str]) -> str:
    """One line for an override of a key the composed config lacks, with the nearest existing key."""
    parent, _, leaf = key.rpartition(".")
    known: list[str] = []
    try:
        cfg = _compose(config_name, [o for o in overrides if _key_of(o) != key])
        from omegaconf import DictConfig, OmegaConf

        node = OmegaConf.select(cfg, parent) if parent else cfg
        if isinstance(node, DictConfig):
            known = [str(k) for k in node if not (not parent and k == "hydra")]
    except Exception:  # noqa: BLE001 (the rest does not compose either: no suggestion, the line still stands)
        known = []
    if not parent:  # a top-level name may be a config group typed wrong (dta=hotpotqa)
        known += [p.name for p in CONFIG_DIR.iterdir() if p.is_dir()]
    return f"{unknown_key(leaf, set(known), parent + '.' if parent else '')}; a new key is added as +{key}=..."


def _unknown_option(path: str) -> str:
    """One line for ``group=option`` naming no config file of the group, with its options."""
    group, _, option = path.rpartition("/")
    folder = CONFIG_DIR / group
    options = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
    if not options:
        return f"no config group {group.replace('/', '.')} (the groups are the folders of {CONFIG_DIR})"
    guess = difflib.get_close_matches(option, options, n=1)
    hint = f" (did you mean {guess[0]}?)" if guess else ""
    return f"{group}={option}: no such option of group {group}{hint}; its options: {', '.join(options)}"


def override_problem(config_name: str, overrides: Sequence[str]) -> str | None:
    """Why ``overrides`` do not compose into ``config_name`` (one line), or None when they do or when the
    error is not about an override (Hydra then reports it as it always has)."""
    from hydra.errors import ConfigCompositionException, MissingConfigException

    try:
        _compose(config_name, overrides)
    except (ConfigCompositionException, MissingConfigException) as err:
        text = str(err)
        missing = re.search(r"Could not find '([^']+)'", text)
        if missing:
            return _unknown_option(missing.group(1))
        key = re.search(r"full_key: (\S+)", text) or re.search(r"Could not override '([^']+)'", text)
        if key and ("not in struct" in text or "Could not override" in text):
            return _unknown_key(key.group(1), config_name, overrides)
        return None
    except Exception:  # noqa: BLE001 (anything else, e.g. a Hydra already initialised by a caller: Hydra's to say)
        return None
    return None


def check_command_line(config_name: str, argv: Sequence[str], prefix: str) -> None:
    """Exit with status 2 and one line on stderr (``prefix`` + why) when the overrides in ``argv`` name a key
    or a group option the config does not have; return otherwise."""
    args = list(argv)
    if not args or any(a.startswith("-") for a in args):  # -m, --help, --cfg ...: Hydra's own
        return
    problem = override_problem(config_name, args)
    if problem is not None:
        print(f"{prefix}{problem}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


__all__ = ["check_command_line", "override_problem"]
