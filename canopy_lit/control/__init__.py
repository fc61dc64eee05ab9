"""The control stage: after each round, stop or retrieve again (METHOD.md §1.1 step 7).

Each ``configs/controller/*.yaml`` targets one factory: ``critic_controller`` (CANOPY's LLM critic,
``LLMCritic``), ``ircot_controller`` (``IRCoTController``), ``no_controller`` (stop after round 1).
``pipeline.build.build_controller`` offers ``llm``, ``hierarchy`` and ``data`` and passes each factory the
ones it declares. A controller implements ``Controller.step(question, evidence, round, history) -> Decision``.
"""

from canopy_lit.control.base import Controller, Decision, no_controller
from canopy_lit.control.critic import CRITIC_MAX_TOKENS, DEFAULT_YES_THRESHOLD, LLMCritic, critic_controller
from canopy_lit.control.ircot import IRCoTController, IRCoTStep, ircot_controller, load_demos

__all__ = [
    "CRITIC_MAX_TOKENS",
    "DEFAULT_YES_THRESHOLD",
    "Controller",
    "Decision",
    "IRCoTController",
    "IRCoTStep",
    "LLMCritic",
    "critic_controller",
    "ircot_controller",
    "load_demos",
    "no_controller",
]
