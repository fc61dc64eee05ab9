"""Typed configs of train and evaluate, checked before any work starts, from the code that consumes them.

One source of truth for each key:

- a group that ``_target_`` s a callable (encoder, refine, llm, tree, model, datamodule, the retrieval variants,
  trainer, loggers ...) takes that callable's keyword arguments, typed and ranged by its signature: a range is
  ``Annotated[int, Ge(1)]`` (``annotated_types``), a set of choices ``Literal[...]``, so the constructor owns its
  knobs and a new argument is checked the day it is added (``**kwargs`` followed to where they go: the hybrid
  retriever's to the dense builder). Nested option blocks (``retrieval.index_options``, ``retrieval.bm25``,
  ``data.options``) are typed the same way by the class or reader they are passed to. The groups ``critic`` and
  ``reader`` are the arguments of the critic controller and the LLM reader.
- the keys no constructor takes (the top-level knobs, the groups read key by key: ``loop``, ``judge``, ``method``
  ...) are dataclasses in ``schemas`` written the same way; a key that none declares is refused, so a new YAML
  key fails the shipped-presets test until it is typed. Lightning's Trainer is the one class we cannot annotate:
  ``TrainerSchema`` holds the ranges of its knobs.

``validate_eval_config(cfg)`` / ``validate_train_config(cfg)`` raise one ``ConfigError`` listing every problem,
one line each, naming the key and the rule::

    tree.branching must be an integer >= 2, got 'two'
    unknown config key loop.max_round (did you mean loop.max_rounds?)

``check_eval_run`` / ``check_train_run`` add what the machine must provide (model weights, optional
packages), so that a run that cannot start says so in seconds. The entry points turn a ``ConfigError``
into exit status 2 (a usage error) without a traceback.

One module per job: ``schemas`` (the keys no constructor takes), ``groups`` (how each node is checked),
``values`` (one value against a type, its range and choices), ``signatures`` (a target's keys from its
signature), ``check`` (a whole config), ``environment`` (what the machine must provide).
"""

from canopy_lit.errors import ConfigError
from canopy_lit.schema.check import (
    check_node,
    embedding_dim,
    group_keys,
    unknown_key,
    validate_eval_config,
    validate_train_config,
)
from canopy_lit.schema.environment import check_eval_run, check_train_run, exit_if_invalid
from canopy_lit.schema.groups import EVAL_GROUPS, PIPELINE_RETRIEVAL_KEYS, TRAIN_GROUPS, Group
from canopy_lit.schema.schemas import CONFIG_DIR, USAGE_ERROR
from canopy_lit.schema.signatures import Key
from canopy_lit.schema.values import check_value

__all__ = [
    "CONFIG_DIR",
    "EVAL_GROUPS",
    "PIPELINE_RETRIEVAL_KEYS",
    "TRAIN_GROUPS",
    "USAGE_ERROR",
    "ConfigError",
    "Group",
    "Key",
    "check_eval_run",
    "check_node",
    "check_train_run",
    "check_value",
    "embedding_dim",
    "exit_if_invalid",
    "unknown_key",
    "group_keys",
    "validate_eval_config",
    "validate_train_config",
]
