"""Per-question records: what each round retrieved, kept and decided, and what it cost."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any


class StageTimer:
    """Wall time accumulated per pipeline stage (seconds)."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()

    @contextmanager
    def __call__(self, stage: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - t0


# How the reader cap treated a held item: "whole" (every kept region reaches the reader), "regions" (cut
# at a region boundary), "tokens" (no region fits: cut at a token boundary), "dropped".
CAP_OUTCOMES = ("whole", "regions", "tokens", "dropped")


@dataclass
class KeptItem:
    """One item of a round: the regions kept (leaf ranges), their tokens and the whole item's tokens.

    ``leaf_ranges`` / ``kept_tokens`` are the refiner's choice; ``delivered_ranges`` /
    ``delivered_tokens`` what the reader gets of it after the reader cap (``cap``: one of
    ``CAP_OUTCOMES``). A leaf cut at a token boundary is in no delivered range, its tokens are counted.
    """

    item_id: str
    modality: str
    leaf_ranges: list[tuple[int, int]]
    n_leaves: int
    kept_tokens: int
    item_tokens: int
    aggregation: bool = False
    delivered_ranges: list[tuple[int, int]] = field(default_factory=list)
    delivered_tokens: int = 0
    cap: str = "whole"


@dataclass
class RoundTrace:
    round: int
    query: str
    retrieved: list[str]
    duplicates: int
    kept: list[KeptItem] = field(default_factory=list)
    controller: dict[str, Any] | None = None


@dataclass
class QuestionRecord:
    """One line of predictions.jsonl."""

    id: str
    question: str
    answers: list[str]
    benchmark: str
    prediction: str = ""
    status: str = "ok"
    error: str | None = None
    rounds: list[RoundTrace] = field(default_factory=list)
    evidence_tokens: int = 0  # what the reader gets, after the reader cap
    truncated_items: int = 0  # held items the reader cap cut or dropped (``KeptItem.cap`` says which)
    llm_calls: dict[str, int] = field(default_factory=dict)
    llm_tokens: dict[str, int] = field(default_factory=dict)
    llm_prefill_tokens: dict[str, int] = field(default_factory=dict)  # prompt tokens not served from a prefix cache
    time_s: dict[str, float] = field(default_factory=dict)
    latency_s: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
