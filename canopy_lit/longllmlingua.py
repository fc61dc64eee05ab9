"""LongLLMLingua (Jiang et al., 2024) through the ``llmlingua`` package, with a small offline causal LM.

The compressor behind ``refine=longllmlingua`` (``canopy_lit.refine.LongLLMLinguaRefiner``). It needs the
``lingua`` extra (``pip install 'canopy-lit[lingua]'``: ``llmlingua`` and ``gguf``), imported only here and
only when that refiner is chosen. The LM is an offline asset (``canopy_lit.assets``: a GGUF file loaded
into transformers, dequantised to float32 on the CPU); nothing is fetched from the hub.

One round's items are compressed as LongLLMLingua does, with ``llmlingua``'s own methods:

1. coarse, question-aware: the items are ranked by the perplexity of the question conditioned on each
   (``rank_method="longllmlingua"``) and kept best first until the round's budget (rate × the items'
   tokens, + ``context_budget``) is spent; the others are dropped whole. Kept items get a dynamic rate,
   higher for better-ranked ones (``dynamic_context_compression_ratio``);
2. fine, token level: each kept item's text is compressed to its rate by the library's iterative
   compression with contrastive perplexity conditioned on the question (``condition_in_question``
   ``after_condition``, ``condition_compare``).

Two departures from ``compress_prompt`` in one call, both so that the evidence stays one block per item
(the loop's unit): the token-level step runs per kept item (the library's one pass also conditions each
item on the items before it), and an item's title / table caption and header pass through verbatim (they
reach the reader with any region of an item under every other refiner). The library's constructor is
bypassed (``PromptCompressor.__new__``): it loads a hub model and fetches tiktoken's GPT-3.5 vocabulary,
which it uses only to report savings; the LM's own tokenizer stands in for it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from canopy_lit.hierarchy.base import ELISION

EXTRA = "lingua"
INSTALL = f"pip install 'canopy-lit[{EXTRA}]'"
# Display names of the assets the compressor may use (the run label names the LM).
LM_NAMES = {"smollm2-135m": "SmolLM2-135M", "qwen2.5-0.5b": "Qwen2.5-Coder-0.5B", "qwen2.5-1.5b": "Qwen2.5-Coder-1.5B"}


def lm_name(model: str) -> str:
    """The LM's display name (``LM_NAMES``, else the spec's file name)."""
    return LM_NAMES.get(model, str(model).rsplit("/", 1)[-1])


def require_llmlingua() -> Any:
    """The ``llmlingua.PromptCompressor`` class; a one-line ImportError naming the extra when it is missing."""
    try:
        import gguf  # noqa: F401  (transformers reads the GGUF file through it)
        from llmlingua import PromptCompressor
    except ImportError as err:
        raise ImportError(
            f"refine=longllmlingua needs the {err.name or 'llmlingua'} package, not installed: {INSTALL}"
        ) from None
    return PromptCompressor


@functools.cache
def load_lm(model: str) -> tuple[Any, Any]:
    """(causal LM, tokenizer) of an asset name or a local GGUF path, float32 on the CPU (cached per process)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from canopy_lit.assets import resolve

    path = resolve(model)
    if path.is_file():  # a GGUF file: transformers dequantises it
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        lm = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    else:  # a transformers folder
        tok = AutoTokenizer.from_pretrained(path)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    lm.eval()
    return lm, tok


class _LMTokens:
    """``encode`` of the LM's tokenizer: stands in for the tiktoken vocabulary the library reports savings in."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids


class _LegacyCacheLM:
    """The LM as llmlingua 0.2 calls it: key/value caches as per-layer ``(keys, values)`` pairs, which it
    slices and iterates; transformers 5 takes and returns ``DynamicCache`` objects instead."""

    def __init__(self, lm: Any) -> None:
        self.lm, self.config = lm, lm.config

    def __call__(self, input_ids: Any, attention_mask: Any = None, past_key_values: Any = None, use_cache: bool = True) -> Any:
        from types import SimpleNamespace

        from transformers import DynamicCache

        if past_key_values is not None and not isinstance(past_key_values, DynamicCache):
            past_key_values = DynamicCache([(k, v) for k, v in past_key_values], config=self.config)
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, past_key_values=past_key_values, use_cache=use_cache)
        cache = out.past_key_values
        legacy = [(layer.keys, layer.values) for layer in cache.layers] if cache is not None else None
        return SimpleNamespace(logits=out.logits, past_key_values=legacy)


def prompt_compressor(model: str) -> Any:
    """An ``llmlingua.PromptCompressor`` around the offline LM ``model`` (no hub, no tiktoken download)."""
    cls = require_llmlingua()
    lm, tok = load_lm(model)
    pc = cls.__new__(cls)
    # What PromptCompressor.__init__ / load_model set for a causal LM on the CPU (llmlingua 0.2).
    pc.model_name, pc.use_llmlingua2, pc.open_api_config = model, False, {}
    pc.retrieval_model = pc.retrieval_model_name = None
    pc.cache_bos_num, pc.prefix_bos_num = 10, 100
    pc.oai_tokenizer = _LMTokens(tok)
    if tok.pad_token_id is None:
        tok.pad_token_id = tok.eos_token_id
    tok.padding_side = "left"
    pc.tokenizer, pc.model, pc.device = tok, _LegacyCacheLM(lm), "cpu"
    pc.context_idxs = []
    pc.max_position_embeddings = int(lm.config.max_position_embeddings)
    return pc


class LongLLMLingua:
    """Question-aware coarse + fine compression of one round's items (module docstring).

    Args:
        model: the causal LM (asset name, e.g. ``smollm2-135m``, or a GGUF path).
        rate: target share of the items' tokens (the compressor's tokenizer) kept, 0 < rate <= 1.
        condition_in_question: the fine step's conditioning (``after_condition``: contrastive perplexity
            with the question before the text, LongLLMLingua's setting; ``none``: plain LLMLingua perplexity).
        dynamic_context_compression_ratio: spread of the per-item rates by coarse rank (0.3 in the paper's code).
        context_budget: slack of the coarse step's budget, in tokens (``"+100"`` as the library's default).
        iterative_size: tokens per step of the iterative token-level compression.
    """

    def __init__(
        self,
        model: str = "smollm2-135m",
        rate: float = 0.55,
        condition_in_question: str = "after_condition",
        dynamic_context_compression_ratio: float = 0.3,
        context_budget: str = "+100",
        iterative_size: int = 200,
    ) -> None:
        if not 0.0 < float(rate) <= 1.0:
            raise ValueError(f"refine.rate must be in (0, 1], got {rate}")
        if condition_in_question not in ("after_condition", "after", "none"):
            raise ValueError(f"refine.condition_in_question must be after_condition, after or none, got {condition_in_question!r}")
        self.model, self.rate = model, float(rate)
        self.condition_in_question = condition_in_question
        self.dynamic_ratio = float(dynamic_context_compression_ratio)
        self.context_budget = str(context_budget)
        self.iterative_size = int(iterative_size)
        self.fallbacks = 0  # rounds whose conditioned fine step failed the library's prefix check: unconditioned
        self.unsplit = 0  # rounds whose compressed text lost an item separator: one block
        self._pc: Any = None

    @property
    def pc(self) -> Any:
        if self._pc is None:
            self._pc = prompt_compressor(self.model)
        return self._pc

    def tokens(self, text: str) -> int:
        return int(self.pc.get_token_length(text, add_special_tokens=False))

    def coarse(self, question: str, texts: Sequence[str]) -> dict[int, float]:
        """Item index -> its dynamic rate offset, for the items the question-aware ranking keeps (in order)."""
        lengths = [self.tokens(t) for t in texts]
        target = self.rate * sum(lengths)
        if len(texts) > 1:
            _, dynamic, used = self.pc.control_context_budget(
                list(texts), lengths, target, question=question,
                condition_in_question="after" if self.condition_in_question != "none" else "none",
                reorder_context="original", dynamic_context_compression_ratio=self.dynamic_ratio,
                rank_method="longllmlingua", context_budget=self.context_budget,
            )  # fmt: skip
        else:
            dynamic, used = [0.0], [0]
        return {int(i): float(d) for i, d in sorted(zip(used, dynamic, strict=True))}

    def fine(self, question: str, texts: Sequence[str], dynamic: Sequence[float], target: float) -> list[str]:
        """The kept items' texts compressed together to ``target`` tokens at the token level (the library's
        iterative compression, conditioned on the question; ``dynamic``: per-item rate offsets), split back
        per item. Should a separator be lost, the whole text comes back as the first item's (``unsplit``)."""
        pc, tok = self.pc, self.pc.tokenizer
        newline = tok("\n", add_special_tokens=False).input_ids[-1]
        # "\n\n" between items is two newline tokens, kept whole (keep_split): the output splits back on it.
        texts = [re.sub(r"\s*\n\s*\n\s*", "\n", t).strip() or ELISION for t in texts]
        kw = dict(iterative_size=self.iterative_size, keep_split=True, split_token_id=newline, dynamic_ratio=list(dynamic))
        ids = None
        if self.condition_in_question == "after_condition":
            try:
                start = pc.get_prefix_length(question + "\n\n", texts[0])
                ids = pc.iterative_compress_prompt([question, *texts], target, start=start, condition_compare=True, **kw)[0]
            except AssertionError:  # the library's prefix check fails on a few tokenisations: run unconditioned
                self.fallbacks += 1
        if ids is None:
            ids = pc.iterative_compress_prompt(list(texts), target, start=0, condition_compare=False, **kw)[0]
        parts = [p.strip() for p in tok.batch_decode(ids)[0].split("\n\n")]
        if len(parts) != len(texts):
            self.unsplit += 1
            return ["\n".join(p for p in parts if p), *[""] * (len(texts) - 1)]
        return parts

    def __call__(self, question: str, heads: Sequence[str], bodies: Sequence[str]) -> list[str | None]:
        """Per item: its head (verbatim) + compressed body, or None where the coarse step drops it.

        Args:
            question: the round's query.
            heads: each item's title / caption / header as rendered before any region ("" for none).
            bodies: the rest of each item's rendering (its kept regions).
        """
        if not bodies:
            return []
        kept = self.coarse(question, [h + b for h, b in zip(heads, bodies, strict=True)])
        used = sorted(kept)
        target = self.rate * sum(self.tokens(h + b) for h, b in zip(heads, bodies, strict=True))
        target -= sum(self.tokens(heads[j]) for j in used)  # heads pass through: the bodies share the rest
        short = self.fine(question, [bodies[j] for j in used], [kept[j] for j in used], max(1.0, target))
        out: list[str | None] = [None] * len(bodies)
        for j, text in zip(used, short, strict=True):
            out[j] = f"{heads[j]}{text}" if text else None
        return out
