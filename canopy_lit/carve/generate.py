"""Generation: each top-k clip goes to the reader in its *winning* configuration's representation.

==============  ====================================  ==================================
winner          vision-language reader                 text-only reader
==============  ====================================  ==================================
visual_frame    the winning frame (image part)         that frame's description
visual_clip     all the clip's frames (image parts)    all frame descriptions with times
text_frame      the winning frame's caption            same
text_clip       the clip summary                       same
==============  ====================================  ==================================

Image parts carry the frame description as ``description``, which the LLM layer shows to a
text-only model instead of the pixels, so one message serves both kinds of reader.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from canopy_lit.carve.representations import ClipCorpus, modality_of
from canopy_lit.carve.rerank import RankedClip
from canopy_lit.hierarchy.base import Frame


@dataclass(frozen=True)
class EvidenceBlock:
    """One clip as the reader receives it: its text form, and frames for visual winners."""

    clip_id: str
    config: str
    text: str
    frames: tuple[Frame, ...] = ()


def evidence_blocks(ranking: Sequence[RankedClip], corpus: ClipCorpus) -> list[EvidenceBlock]:
    """Reader evidence for a ranking, in rank order (see the module table)."""
    out = []
    for r in ranking:
        view = corpus.views[r.winner]
        frames = view.frames[r.unit] if modality_of(r.winner) == "visual" else ()
        out.append(EvidenceBlock(corpus.clips[r.clip].id, r.winner, view.texts[r.unit], tuple(frames)))
    return out


def winner_distribution(winners: Sequence[str]) -> dict[str, float]:
    """Share of each configuration among winners (empty input -> {})."""
    n = len(winners)
    return {c: v / n for c, v in sorted(Counter(winners).items())} if n else {}


@dataclass
class CarveAnswer:
    text: str
    raw: str
    evidence_tokens: int
    image_parts: int


class CarveReader:
    """Answers a question from evidence blocks with any ``canopy_lit.llm.LLM``.

    With a multimodal LLM (``llm.multimodal``) visual blocks send their frames as image parts; a
    text-only LLM gets the same blocks as text (the LLM layer renders image parts as descriptions,
    and blocks are sent as plain text to keep the prompt identical to ``LLMReader``'s).

    Args:
        llm: the reader model.
        max_tokens: answer length cap.
        max_side: frame downscale bound for image parts.
    """

    def __init__(self, llm: Any, max_tokens: int = 32, max_side: int = 448) -> None:
        from canopy_lit.reader.llm_reader import LLMReader

        self.llm = llm
        self.max_tokens = max_tokens
        self.max_side = max_side
        self.text_reader = LLMReader(llm, max_tokens=max_tokens)

    @property
    def vision(self) -> bool:
        return bool(getattr(self.llm, "multimodal", False))

    def answer(self, question: str, blocks: Sequence[EvidenceBlock], choices: Sequence[str] | None = None) -> CarveAnswer:
        texts = [b.text for b in blocks]
        tokens = sum(self.llm.count_tokens(t) for t in texts)
        if not self.vision or not any(b.frames for b in blocks):
            ans = self.text_reader.read(question, texts, choices)
            return CarveAnswer(ans.letter or ans.text if choices else ans.text, ans.raw, tokens, 0)
        return self._answer_with_frames(question, blocks, choices, tokens)

    def _answer_with_frames(
        self, question: str, blocks: Sequence[EvidenceBlock], choices: Sequence[str] | None, tokens: int
    ) -> CarveAnswer:
        from canopy_lit.llm import prompts
        from canopy_lit.llm.base import system
        from canopy_lit.llm.parsing import parse_choice_letter, parse_short_answer
        from canopy_lit.visual.frames import load_frames
        from canopy_lit.visual.messages import image_part, text_part

        parts: list[dict[str, Any]] = [text_part(prompts.question_block(question, choices) + "\n\nEvidence:")]
        n_images = 0
        for i, b in enumerate(blocks, 1):
            parts.append(text_part(f"[{i}] {b.text}"))
            for im in load_frames(list(b.frames)) if b.frames else []:
                parts.append(image_part(im, self.max_side))
                n_images += 1
        tail = (
            "Task: answer the question. Reply with the letter of the correct option only."
            if choices
            else "Task: answer the question. Reply with the answer only: a short phrase, without a full sentence."
        )
        parts.append(text_part(tail))
        messages = [system(prompts.SHARED_SYSTEM), {"role": "user", "content": parts}]
        resp = self.llm.chat(messages, max_tokens=self.max_tokens, role="reader")
        if choices:
            letter = parse_choice_letter(resp.text, len(choices))
            return CarveAnswer(letter or "", resp.text, tokens, n_images)
        return CarveAnswer(parse_short_answer(resp.text), resp.text, tokens, n_images)
