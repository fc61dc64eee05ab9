"""Every prompt the pipeline sends, in one place.

Layout rule (for llama.cpp / vLLM prefix caching): what stays the same comes first. The critic and
the reader share one system prompt and one ``Question + Evidence`` block, and only the short task
line at the end differs; evidence added in a later round is appended after earlier evidence. So a
later critic round, the follow-up call and the final reader call prefill only what is new.

Each builder returns OpenAI-format messages; its docstring says what the model must return and
``canopy_lit.llm.parsing`` has the matching parser.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from canopy_lit.llm.base import Message, system, user

SHARED_SYSTEM = (
    "You work on questions answered from retrieved evidence. Use only the evidence shown, not "
    "outside knowledge. Be brief and follow the requested output format exactly."
)

# ----------------------------------------------------------------- shared question/evidence block


def format_evidence(evidence: Sequence[str]) -> str:
    """Numbered evidence pieces, one per block, in the order given (earlier rounds first)."""
    if not evidence:
        return "(no evidence)"
    return "\n\n".join(f"[{i}] {e.strip()}" for i, e in enumerate(evidence, 1))


def format_choices(choices: Sequence[str]) -> str:
    return "\n".join(f"{chr(65 + i)}. {c}" for i, c in enumerate(choices))


def question_block(question: str, choices: Sequence[str] | None = None) -> str:
    """The question (and its lettered options) as every prompt states it."""
    q = f"Question: {question.strip()}"
    if choices:
        q += f"\nOptions:\n{format_choices(choices)}"
    return q


def _qe(question: str, evidence: Sequence[str], choices: Sequence[str] | None) -> str:
    return f"{question_block(question, choices)}\n\nEvidence:\n{format_evidence(evidence)}\n\n"


# ----------------------------------------------------------------- prompt size

#: Tokens a chat template adds around one message (role markers, separators), also charged once for
#: the reply's header. ChatML (Qwen, SmolLM2) adds about 5; the rest is margin for other templates.
TEMPLATE_TOKENS_PER_MESSAGE = 8
#: Tokens ``format_evidence`` adds around one evidence piece (``[12] `` and the blank line after it).
EVIDENCE_FRAME_TOKENS = 6


def _message_text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content or [] if p.get("type") == "text")


def prompt_tokens(messages: Sequence[Message], count_tokens: Callable[[str], int]) -> int:
    """Tokens of ``messages`` once a chat template lays them out (text parts only), reply header included."""
    template = TEMPLATE_TOKENS_PER_MESSAGE * (len(messages) + 1)
    return template + sum(count_tokens(_message_text(m)) for m in messages)


def prompt_tokens_bound(messages: Sequence[Message]) -> int:
    """An upper bound of ``prompt_tokens`` without a tokenizer: a token covers at least one UTF-8 byte."""
    template = TEMPLATE_TOKENS_PER_MESSAGE * (len(messages) + 1)
    return template + sum(len(_message_text(m).encode()) for m in messages)


# ----------------------------------------------------------------- critic

CRITIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sufficient": {"type": "boolean"},
        "missing": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "followup_query": {"type": "string"},
    },
    "required": ["sufficient", "missing", "followup_query"],
}

FOLLOWUP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "missing": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "followup_query": {"type": "string"},
    },
    "required": ["missing", "followup_query"],
}

_CRITIC_RULE = (
    "Task: decide whether the evidence states every fact needed to answer the question. A question "
    "that connects two entities needs the facts about both."
)


def critic_json(question: str, evidence: Sequence[str], choices: Sequence[str] | None = None) -> list[Message]:
    """Critic verdict as JSON.

    Must return a JSON object ``{"sufficient": bool, "missing": [str, ...], "followup_query": str}``:
    ``missing`` lists the needed facts absent from the evidence, ``followup_query`` is a search query
    for them ("" when sufficient). Parsed by ``parsing.parse_critic``.
    """
    tail = (
        f"{_CRITIC_RULE}\nReply with JSON only: "
        '{"sufficient": true/false, "missing": [<missing fact>, ...], "followup_query": "<search query for the '
        'missing facts>"}. When sufficient, use [] and "".'
    )
    return [system(SHARED_SYSTEM), user(_qe(question, evidence, choices) + tail)]


def critic_yes_no(question: str, evidence: Sequence[str], choices: Sequence[str] | None = None) -> list[Message]:
    """Critic verdict as one word, read from log-probabilities.

    Must return ``Yes`` (evidence is enough) or ``No`` as its first token; the critic reads
    P(yes) from that token's top log-probabilities (``parsing.p_yes``), not from the text.
    """
    tail = f"{_CRITIC_RULE}\nIs the evidence enough to answer the question? Answer Yes or No."
    return [system(SHARED_SYSTEM), user(_qe(question, evidence, choices) + tail)]


def critic_followup(question: str, evidence: Sequence[str], choices: Sequence[str] | None = None) -> list[Message]:
    """Follow-up query once the evidence is judged insufficient (log-prob critic mode).

    Must return JSON ``{"missing": [str, ...], "followup_query": str}``; an empty or unparseable
    query falls back to the original question.
    """
    tail = (
        "Task: the evidence is not enough to answer the question. Name the missing facts and write a "
        'search query for them. Reply with JSON only: {"missing": [<missing fact>, ...], '
        '"followup_query": "<search query for the missing facts>"}'
    )
    return [system(SHARED_SYSTEM), user(_qe(question, evidence, choices) + tail)]


# ----------------------------------------------------------------- reader


def reader(question: str, evidence: Sequence[str], choices: Sequence[str] | None = None) -> list[Message]:
    """Final answer.

    Must return a short answer only (an entity, number, date or yes/no; no sentence, no
    explanation), or, with ``choices``, the letter of the correct option (``A``, ``B``, ...).
    Parsed by ``parsing.parse_short_answer`` / ``parsing.parse_choice_letter``.
    """
    if choices:
        tail = "Task: answer the question. Reply with the letter of the correct option only."
    else:
        tail = (
            "Task: answer the question. Reply with the answer only: a short phrase such as a name, number, "
            "date or yes/no, without a full sentence or explanation."
        )
    return [system(SHARED_SYSTEM), user(_qe(question, evidence, choices) + tail)]


# ----------------------------------------------------------------- table aggregation classifier

AGGREGATION_LABELS = ("aggregation", "lookup")


def aggregation_classifier(question: str) -> list[Message]:
    """Does answering need arithmetic over several table cells? Judged from the question alone.

    Must return JSON ``{"label": "aggregation" | "lookup"}`` (a bare word is accepted too):
    ``aggregation`` when the answer is computed from several rows or cells (count, sum, average,
    difference, change, ratio, max/min, ranking), ``lookup`` when it is read from one cell or row.
    """
    return [
        system(
            "You classify questions about tables. 'aggregation': the answer must be computed from several rows "
            "or cells (count, sum, average, difference, change, ratio, percentage, largest/smallest, ranking). "
            "'lookup': the answer is read from a single cell or row. "
            'Reply with JSON only: {"label": "aggregation"} or {"label": "lookup"}.'
        ),
        user(question_block(question)),
    ]


def label_schema(labels: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"label": {"type": "string", "enum": list(labels)}},
        "required": ["label"],
    }


# ----------------------------------------------------------------- modality router

MODALITY_HINTS = {
    "text": "text passages (encyclopedia articles, documents)",
    "table": "tables (numbers, statistics, lists of records)",
    "image": "images (what something looks like, colours, objects in a picture)",
    "video": "videos (events over time, actions, what happens in a scene)",
    "none": "no retrieval needed (general knowledge or a trivial question)",
}


def modality_router(question: str, modalities: Sequence[str]) -> list[Message]:
    """Which corpus to search.

    Must return JSON ``{"label": m}`` with ``m`` one of ``modalities`` (a bare word is accepted).
    """
    options = "\n".join(f"- {m}: {MODALITY_HINTS.get(m, m)}" for m in modalities)
    return [
        system(
            "You route a question to the kind of source most likely to contain its answer. Sources:\n"
            f"{options}\nReply with JSON only: " + '{"label": "<one source name>"}.'
        ),
        user(question_block(question)),
    ]


# ----------------------------------------------------------------- IRCoT

IRCOT_ANSWER_MARK = "So the answer is:"


@dataclass(frozen=True)
class IRCoTDemo:
    """A worked IRCoT example (built from a *training* question: ``canopy_lit.control.ircot``).

    ``paragraphs``: its gold items as the reader would see them; ``steps``: one reasoning sentence
    per gold fact, in order; ``answer``: the short answer that closes the chain.
    """

    question: str
    paragraphs: tuple[str, ...]
    steps: tuple[str, ...]
    answer: str

    def reasoning(self) -> str:
        return " ".join([*(s.strip() for s in self.steps), f"{IRCOT_ANSWER_MARK} {self.answer}."])


def _ircot_case(question: str, paragraphs: Sequence[str], reasoning: str) -> str:
    return f"Paragraphs:\n{format_evidence(paragraphs)}\n\n{question_block(question)}\nReasoning: {reasoning}"


def ircot_step(
    question: str, paragraphs: Sequence[str], thoughts: Sequence[str], demos: Sequence[IRCoTDemo] = ()
) -> list[Message]:
    """Next chain-of-thought sentence for IRCoT (interleaved retrieval and reasoning).

    As in the original IRCoT, worked examples (``demos``: whole chains that state one fact per
    sentence and end with the answer mark) come first, so they are a stable, cached prefix.
    Must return the next reasoning sentence, which adds one fact from the paragraphs and becomes
    the next retrieval query; once the reasoning so far gives the answer, ``So the answer is:
    <short answer>``. Only the first sentence counts (``control.ircot.IRCoTController``).
    """
    so_far = " ".join(t.strip() for t in thoughts) if thoughts else ""
    examples = "".join(
        f"Example {i}:\n{_ircot_case(d.question, d.paragraphs, d.reasoning())}\n\n" for i, d in enumerate(demos, 1)
    )
    head = f"{examples}Now the question to answer.\n\n" if demos else ""
    return [
        system(
            "You answer multi-hop questions by reasoning one sentence at a time over the paragraphs. Each step "
            "states one new fact from the paragraphs. When the facts so far give the answer, write "
            f"'{IRCOT_ANSWER_MARK} <short answer>'."
        ),
        user(
            f"{head}{_ircot_case(question, paragraphs, so_far or '(none yet)')}\n\n"
            "Write only the next reasoning sentence."
        ),
    ]


# ----------------------------------------------------------------- relevance (cross-encoder style)


def relevance(question: str, passage: str) -> list[Message]:
    """Relevance of one passage to a question, read from log-probabilities.

    Must return ``Yes`` (the passage states something that helps answer the question) or ``No`` as
    its first token. The question comes before the passage so scoring many passages for one
    question reuses the cached prefix.
    """
    return [
        system(SHARED_SYSTEM),
        user(
            f"{question_block(question)}\n\nPassage:\n{passage.strip()}\n\n"
            "Does the passage state information that helps answer the question? Answer Yes or No."
        ),
    ]


# ----------------------------------------------------------------- answer judge (eval/judge)

JUDGE_SYSTEM = (
    "You grade answers to questions. Decide whether the predicted answer means the same as one of the gold "
    "answers. Differences in wording, formatting, capitalisation, units written out or extra detail that does "
    "not change the answer are fine; a different, partial, hedged or missing answer is wrong. Do not judge "
    "whether the gold answers are right. Reply with Yes or No only."
)


def answer_judge(question: str, answers: Sequence[str], prediction: str) -> list[Message]:
    """LLM-as-judge correctness of one prediction against the gold answers (``eval/judge``).

    Must return ``Yes`` (the prediction gives one of the gold answers) or ``No`` as its first word
    (JSON ``{"label": "yes" | "no"}`` is accepted too). Parsed by ``parsing.parse_label`` with the
    labels ``JUDGE_LABELS``; a reply with neither word is unparsed and scores 0.
    """
    gold = "\n".join(f"- {a.strip()}" for a in answers if a.strip()) or "- (none given)"
    return [
        system(JUDGE_SYSTEM),
        user(
            f"{question_block(question)}\nGold answers:\n{gold}\nPredicted answer: {prediction.strip() or '(empty)'}"
            "\n\nIs the predicted answer correct? Answer Yes or No."
        ),
    ]


JUDGE_LABELS = ("yes", "no")
