"""The control stage's interface: after each round, stop or go on with a follow-up query (METHOD.md §1.1 step 7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from canopy_lit.types import Question


@dataclass
class Decision:
    """A controller's verdict after a round: stop, or go on with ``followup`` as the next query."""

    stop: bool
    followup: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


class Controller(Protocol):
    """Decides after each round whether the evidence suffices (critic) or what to fetch next (IRCoT).

    ``evidence`` holds one rendered block per held item, oldest first (stable prompt prefix)."""

    def step(
        self, question: Question, evidence: list[str], round: int, history: list[dict[str, Any]]
    ) -> Decision: ...


def no_controller() -> Controller | None:
    """``controller=none``: the loop stops after its first round. None rather than an always-stop
    controller, so that no controller call or verdict is recorded for it (the loop's contract)."""
    return None
