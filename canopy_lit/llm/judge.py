"""The judge role: an LLM asked whether a prediction means one of the gold answers (``eval/judge``).

``AnswerJudge`` asks (``prompts.answer_judge``: question, gold answers, prediction -> Yes / No) and
reads the verdict with ``parsing.parse_label``; ``judge_fingerprint`` names the judge (model config,
prompt, options) so that a cached verdict is never reused by another judge; ``cache_key`` is a
verdict's identity. ``canopy_lit.pipeline.build.build_judge`` builds one from config;
``canopy_lit.eval.judge`` judges run folders with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM
from canopy_lit.llm.parsing import PARSE_STATS, ParseStats, p_yes, parse_label

# Backend knobs that change speed or plumbing, not the judge's replies: left out of the fingerprint.
_OPERATIONAL_KEYS = frozenset({
    "_convert_", "n_threads", "n_parallel", "n_batch", "timeout", "max_retries", "max_concurrency",
    "calibration", "cache_prompt", "api_key_env", "tokenizer", "multimodal",
})  # fmt: skip


def judge_fingerprint(llm_config: Mapping[str, Any] | str, *, max_tokens: int, logprobs: int) -> str:
    """A short hash naming the judge: its model config (minus operational knobs), prompt and options.

    Args:
        llm_config: the resolved ``llm`` config (``_target_``, model, base URL, context, seed, ...),
            or any string that names the judge model (library use without a config).
    """
    if isinstance(llm_config, Mapping):
        ident: Any = {k: llm_config[k] for k in sorted(llm_config) if k not in _OPERATIONAL_KEYS}
    else:
        ident = str(llm_config)
    probe = prompts.answer_judge("{question}", ["{gold}"], "{prediction}")  # the template, not one question
    blob = json.dumps({"llm": ident, "prompt": probe, "max_tokens": max_tokens, "logprobs": logprobs},
                      sort_keys=True, default=str)  # fmt: skip
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_key(question_id: str, question: str, answers: Sequence[str], prediction: str, fingerprint: str) -> str:
    """The verdict's identity: everything the judge prompt shows, and the judge."""
    blob = json.dumps([question_id, question, [str(a) for a in answers], prediction, fingerprint])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass
class Judgement:
    """One verdict, as stored in ``judgements.jsonl`` (``id`` is the cache key, not the question id).

    Attributes:
        verdict: True = correct, False = wrong, None = no readable verdict (scores 0).
        p_yes: P(yes) / (P(yes) + P(no)) of the first reply token when log-probs were asked (for analysis).
    """

    id: str
    question_id: str
    answers: list[str]
    prediction: str
    judge: str
    verdict: bool | None
    raw: str
    p_yes: float | None = None


class AnswerJudge:
    """Asks ``llm`` whether a prediction is correct; verdict read with ``parsing.parse_label``.

    Args:
        llm: any backend of the ``LLM`` protocol (calls are logged under the role ``judge``).
        fingerprint: names the judge model in cache keys (``judge_fingerprint``).
        max_tokens: reply budget (the verdict is its first word).
        logprobs: top alternatives per token to ask for (0 for servers without log-probs); only
            recorded as ``p_yes``, the verdict comes from the text.
        stats: parse counter (``kind="judge"``).
    """

    def __init__(
        self,
        llm: LLM,
        fingerprint: str,
        *,
        max_tokens: int = 16,
        logprobs: int = 5,
        stats: ParseStats | None = None,
    ) -> None:
        self.llm = llm
        self.fingerprint = fingerprint
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.stats = stats or PARSE_STATS

    def __call__(self, question_id: str, question: str, answers: Sequence[str], prediction: str) -> Judgement:
        reply = self.llm.chat(
            prompts.answer_judge(question, answers, prediction),
            role="judge", max_tokens=self.max_tokens, logprobs=self.logprobs, temperature=0.0,
        )  # fmt: skip
        label, parsed = parse_label(reply.text, prompts.JUDGE_LABELS, default="no", kind="judge", stats=self.stats)
        return Judgement(
            id=cache_key(question_id, question, answers, prediction, self.fingerprint),
            question_id=question_id,
            answers=[str(a) for a in answers],
            prediction=prediction,
            judge=self.fingerprint,
            verdict=(label == "yes") if parsed else None,
            raw=reply.text,
            p_yes=p_yes(reply.top_logprobs[0]) if reply.top_logprobs else None,
        )
