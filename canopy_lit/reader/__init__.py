"""The read stage: what the reader gets of the held evidence under a token cap, and the answer
(METHOD.md §1.1 step 8).

- ``base``: the ``Reader`` interface and ``NoReader`` (the evidence mode's empty seat);
- ``llm_reader``: ``LLMReader``, the LLM that answers;
- ``budget``: ``EvidenceBudget``, the one owner of every cut of evidence to a token budget (the loop's
  reader cap, ``canopy_lit.compress``'s ``budget``).
"""

from canopy_lit.reader.base import NoReader, Reader
from canopy_lit.reader.budget import CappedEvidence, EvidenceBudget, ReaderBlock
from canopy_lit.reader.llm_reader import LLMReader, ReaderAnswer

__all__ = [
    "CappedEvidence",
    "EvidenceBudget",
    "LLMReader",
    "NoReader",
    "Reader",
    "ReaderAnswer",
    "ReaderBlock",
]
