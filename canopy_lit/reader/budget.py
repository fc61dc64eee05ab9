"""The evidence budget (METHOD.md §1.1 step 8): what a reader gets of the held items under a token cap.

One module owns every cut of evidence to a token budget: the loop's reader cap (``EvidenceBudget.cap``,
which the critic and the reader both see), ``canopy_lit.compress``'s ``budget`` and the fitting of a prompt
into an LLM backend's context (``llm.context.fit_evidence``). Both cut a text inside with the renderer's
``hierarchy.base.cut_prefix``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.hierarchy.base import ELISION, TokenCounter, cut_prefix, elided
from canopy_lit.types import Evidence


@dataclass
class ReaderBlock:
    """What the reader cap left of one held item.

    Attributes:
        evidence: the held item and the regions its refiner kept.
        node_ids: the kept regions the reader gets whole.
        text: the block as the reader gets it ("" when dropped).
        tokens: its reader tokens.
        cap: ``whole``, ``regions`` (cut at a region boundary), ``tokens`` (cut inside ``cut_leaf``)
            or ``dropped`` (``trace.CAP_OUTCOMES``).
        cut_leaf: the leaf cut at a token boundary; ``cut_chars``: characters of
            ``evidence_text(tree, [cut_leaf])`` before the cut.
    """

    evidence: Evidence
    node_ids: list[int]
    text: str
    tokens: int
    cap: str
    cut_leaf: int | None = None
    cut_chars: int = 0

    def delivered_ranges(self) -> list[tuple[int, int]]:
        tree = self.evidence.tree
        return [(int(tree.starts[v]), int(tree.ends[v])) for v in self.node_ids]


@dataclass
class CappedEvidence:
    """The reader's evidence under the cap: one ``ReaderBlock`` per held item, oldest first."""

    items: list[ReaderBlock]

    @property
    def blocks(self) -> list[str]:
        """The blocks the reader is handed, oldest first."""
        return [b.text for b in self.items if b.text]

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.items)

    @property
    def not_whole(self) -> int:
        """Held items the reader does not get whole (cut or dropped)."""
        return sum(b.cap != "whole" for b in self.items)


class EvidenceBudget:
    """Renders held evidence and cuts it to ``max_tokens`` reader tokens.

    Args:
        hierarchy: renders a tree's kept regions as a block.
        count_tokens: the reader's tokenizer.
        max_tokens: the cap (``loop.reader_max_tokens``; ``compress``'s ``budget``).
    """

    def __init__(self, hierarchy: Hierarchy, count_tokens: TokenCounter, max_tokens: int) -> None:
        self.hierarchy = hierarchy
        self.count_tokens = count_tokens
        self.max_tokens = max_tokens

    def block(self, ev: Evidence) -> str:
        """``ev`` as the reader gets it whole: a text-compressing refiner's block, else its kept regions."""
        if ev.text is not None:
            return ev.text
        return self.hierarchy.evidence_text(ev.tree, ev.node_ids)

    def head(self, ev: Evidence) -> str:
        """The title / caption / header ``ev``'s block starts with, as rendered before any region ("" when
        a compressed block does not start with it)."""
        head = self.hierarchy.evidence_text(ev.tree, []).removesuffix(ELISION)
        return head if ev.text is None or ev.text.startswith(head) else ""

    def cap(self, evidence: Sequence[Evidence], tokens: Sequence[int] | None = None) -> CappedEvidence:
        """What the reader gets of each held item under the cap.

        Items are taken newest round first and, within a round, in rank order (the retriever's order):
        they are kept whole while they fit; the first one that does not is cut to the tokens left
        (``truncate_block``), and every item after it is dropped: an older round never survives a
        newer one, a lower rank never survives a higher one of its round.

        Args:
            evidence: the held items, oldest round first, each round in rank order.
            tokens: reader tokens of each whole block (None = count them here).
        """
        blocks = [self.block(ev) for ev in evidence]
        if tokens is None:  # the loop passes the counts it already took per round
            tokens = [self.count_tokens(b) for b in blocks]
        out: list[ReaderBlock | None] = [None] * len(evidence)
        total = 0
        full = False
        for i in sorted(range(len(evidence)), key=lambda j: (-evidence[j].round, j)):
            ev = evidence[i]
            if full:
                out[i] = ReaderBlock(ev, [], "", 0, "dropped")
            elif total + tokens[i] <= self.max_tokens:
                # a compressed block delivers no region whole: its node ids stay with the evidence only
                out[i] = ReaderBlock(ev, [] if ev.text is not None else list(ev.node_ids), blocks[i], tokens[i], "whole")
                total += tokens[i]
            else:
                left = self.max_tokens - total
                cut = (self._cut_text(ev, ev.text, len(self.head(ev)), left) if ev.text is not None
                       else self.truncate_block(ev, left)) or ReaderBlock(ev, [], "", 0, "dropped")  # fmt: skip
                out[i] = cut
                total += cut.tokens
                full = True
        return CappedEvidence([b for b in out if b is not None])

    def truncate_block(self, ev: Evidence, budget: int) -> ReaderBlock | None:
        """The longest leading part of ``ev``'s regions whose rendering fits ``budget`` tokens.

        Regions are taken in leaf order; a region that does not fit is replaced by its children
        (finer regions of the same tree), so the cut falls on a region boundary and the dropped rest
        is marked with the renderer's elision. When not even the first leaf fits (one huge sentence
        or row), that leaf is cut at a token boundary instead. None when not even the item's title or
        header fits with a word of content.
        """
        if budget <= 0:
            return None
        tree = ev.tree
        queue = deque(sorted(ev.node_ids, key=lambda v: int(tree.starts[v])))
        chosen: list[int] = []
        best: ReaderBlock | None = None
        while queue:
            v = queue.popleft()
            text = self.hierarchy.evidence_text(tree, [*chosen, v])
            n = self.count_tokens(text)
            if n <= budget:
                chosen.append(v)
                best = ReaderBlock(ev, list(chosen), text, n, "regions")
            elif tree.children[v]:
                queue.extendleft(reversed(tree.children[v]))
            elif not chosen:
                # the first leaf alone does not fit: cut it inside, after the title / header
                head = len(self.hierarchy.evidence_text(tree, []).removesuffix(ELISION))
                return self._cut_text(ev, self.hierarchy.evidence_text(tree, [v]), head, budget, v)
            else:
                break  # a leaf that does not fit: stop, so the kept part stays a contiguous prefix
        return best

    def _cut_text(self, ev: Evidence, text: str, head: int, budget: int, leaf: int | None = None) -> ReaderBlock | None:
        """``text`` cut to ``budget`` tokens beyond its first ``head`` characters; ``leaf``: the leaf
        ``text`` renders (None: a compressed block)."""
        end = cut_prefix(text, head, budget, self.count_tokens)
        if end is None:
            return None
        block = elided(text, end)
        return ReaderBlock(ev, [], block, self.count_tokens(block), "tokens", cut_leaf=leaf, cut_chars=end)
