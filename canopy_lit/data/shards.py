"""``shard=I/N``: one of N disjoint parts of a run's questions, for evaluations split across processes or machines.

Shard ``I`` (0-based, ``0 <= I < N``) holds the questions at positions ``I, I + N, I + 2N, ...`` of the run's
deterministic question order (the split, then ``limit``), so the N shards partition exactly the questions an
unsharded run answers, and interleaving spreads slow and fast questions over every shard. Each shard runs into
its own run folder; ``python -m canopy_lit.report merge-shards OUT SHARD_DIR...`` makes the unsharded run folder
of them (``canopy_lit.evaluate.merge_shards``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from canopy_lit.errors import ConfigError  # not canopy_lit.schema, which imports this module

T = TypeVar("T")

_SPEC = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
# The runners that answer their questions through load_questions + the harness and whose outputs a merge
# recomputes (canopy_lit.evaluate.merge_shards): the evidence loop in qa mode, and evidence mode.
SHARDED_MODES = {"qa": "canopy_lit.eval.modes.run_qa", "evidence": "canopy_lit.eval.modes.run_evidence_mode"}
QA_RUNNER = SHARDED_MODES["qa"]


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, spec: Any) -> Shard | None:
        """``"I/N"`` -> ``Shard(I, N)``; None for null.

        Raises:
            ValueError: not ``I/N`` with ``0 <= I < N`` (the message names the key and the rule).
        """
        if spec is None:
            return None
        match = _SPEC.fullmatch(str(spec)) if isinstance(spec, str) else None
        if match is not None:
            index, count = int(match[1]), int(match[2])
            if 0 <= index < count:
                return cls(index, count)
        raise ValueError(
            f"shard must be I/N with 0 <= I < N (0-based: shard=0/3, shard=1/3 and shard=2/3 are the three "
            f"shards of a run), got {spec!r}"
        )

    def select(self, items: Sequence[T]) -> list[T]:
        """This shard's part of ``items`` (every ``count``-th from position ``index``)."""
        return list(items[self.index :: self.count])


def shard_problems(spec: Any, mode: Any, runner: Any) -> list[str]:
    """The config problems of ``shard`` (for ``canopy_lit.schema``): its form, and a mode that runs whole.

    Args:
        runner: the ``_target_`` of the mode's runner (its block under ``modes``; qa's is ``method.runner``).
    """
    try:
        shard = Shard.parse(spec)
    except ValueError as err:
        return [str(err)]
    if shard is None:
        return []
    if mode not in SHARDED_MODES:
        return [f"shard={spec}: mode={mode} runs whole (shards split qa and evidence runs); remove shard="]
    if mode == "qa" and runner != QA_RUNNER:
        return [f"shard={spec}: method.runner {runner} runs whole (shards split the evidence loop's qa runs); "
                "remove shard="]  # fmt: skip
    if runner != SHARDED_MODES[mode]:
        return [f"shard={spec}: modes.{mode} runner {runner} runs whole (shards split {SHARDED_MODES[mode]}'s runs); "
                "remove shard="]  # fmt: skip
    return []


def shard_questions(questions: Sequence[T], spec: Any) -> list[T]:
    """The questions of shard ``spec`` (all of them for null).

    Raises:
        ConfigError: a malformed ``spec``, or more shards than questions (some shard would be empty).
    """
    try:
        shard = Shard.parse(spec)
    except ValueError as err:
        raise ConfigError([str(err)]) from None
    if shard is None:
        return list(questions)
    if shard.count > len(questions):
        raise ConfigError([
            f"shard={shard}: the run has {len(questions)} questions, fewer than its {shard.count} shards; "
            f"use at most {len(questions)} shards"
        ])  # fmt: skip
    return shard.select(questions)
