"""The ``retriever`` config group: where a round's items come from (METHOD.md §1.1 step 1).

``retriever=corpus`` is the paper's setting: one index over every benchmark's items, built by the
``retrieval`` group (dense FAISS, BM25 or hybrid, with its index knobs). ``retriever=candidates``
ranks only the question's own delivered items (HotpotQA's distractor setting, a TAT-QA document),
which isolates compression from retrieval errors; ``retriever=benchmark`` ranks every item of the
loaded benchmark file for every question (small sets, e.g. the bundled LVBench clips).

Each option's YAML targets one factory below; ``pipeline.build.build_retriever`` offers ``retrieval``,
``bench``, ``encoder``, ``hierarchy``, ``llm``, ``index`` (the ``retrieval`` group's index builder),
``ranking`` (its ``candidate_ranking``) and ``item_cache``, and passes each factory the ones it declares.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from omegaconf import DictConfig

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.retrieval.base import Retriever
from canopy_lit.retrieval.candidates import CandidateRanking, CandidateRetriever
from canopy_lit.retrieval.router import LLMModalityRouter

log = logging.getLogger(__name__)


def corpus_retriever(
    retrieval: Mapping[str, Any] | DictConfig,
    encoder: Any,
    index: Callable[..., Retriever],
    llm: Any = None,
    bench: Any = None,
) -> Retriever:
    """``retriever=corpus``: the index the ``retrieval`` group targets (dense, BM25, hybrid) over its
    ``benchmarks``' union corpus, or over your own corpus file (``retrieval.corpus=PATH``), cached by content.

    With ``retrieval.corpus`` set, every question retrieves from that file's items alone (the loaded
    benchmark adds none); a gold item the file lacks is never retrieved, and counts as missed. Otherwise the
    loaded benchmark (``data=X data.path=P``, with ``data.options``) stands in for X's entry of the
    union: the corpus holds P's items, not the bundled file's. A benchmark outside ``retrieval.benchmarks``
    is not added (its questions retrieve from the others' items; one warning says so).

    Args:
        retrieval: the ``retrieval`` group (``routing``, ``benchmarks``, ``corpus``).
        encoder: f0 embeds the corpus and the queries.
        index: the ``retrieval`` group's index builder with its knobs bound (``build.build_index``).
        llm: the modality router's LLM when ``retrieval.routing`` is on (offered only the modalities
            the index holds, one call per query text).
        bench: the run's loaded benchmark (None: the union as ``retrieval.benchmark_options`` reads it).

    The corpus vectors are cached by content, so no ``item_cache``; the index ranks, so no ``ranking``.
    """
    router = LLMModalityRouter(llm) if retrieval.get("routing") else None
    kwargs: dict[str, Any] = {"encoder": encoder, "router": router}
    name = str(getattr(bench, "name", "") or "").lower()
    union = [str(b).lower() for b in (retrieval.get("benchmarks") or ())]
    if retrieval.get("corpus"):
        log.info("retriever=corpus: retrieving from %s (retrieval.corpus)", retrieval.get("corpus"))
    elif name and name in union and _accepts(index, "loaded"):
        kwargs["loaded"] = {name: bench}
    elif name and union and name not in union:
        log.warning(
            "retriever=corpus: data=%s is not in retrieval.benchmarks %s; the corpus holds only their items",
            name, union,
        )  # fmt: skip
    return index(**kwargs)


def _accepts(fn: Callable[..., Any], key: str) -> bool:
    """Whether ``fn`` (a builder or a ``functools.partial`` of one) takes keyword ``key``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return key in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def candidate_retriever(
    retrieval: Mapping[str, Any] | DictConfig,
    bench: Any,
    encoder: Any,
    hierarchy: Hierarchy,
    llm: Any = None,
    pool: str = "candidates",
    item_cache: Any = None,
    ranking: CandidateRanking | None = None,
) -> CandidateRetriever:
    """``retriever=candidates`` (each question's delivered items) or ``retriever=benchmark`` (every item
    of the loaded file for every question), ranked by ``ranking``.

    Args:
        retrieval: the ``retrieval`` group (``routing``).
        bench: the loaded benchmark (``items``, ``candidates``, ``questions``).
        encoder: f0 embeds both sides for dense ranking.
        hierarchy: renders an item's root as its text.
        llm: the modality router's LLM, used only when the pool holds more than one modality.
        pool: ``candidates`` or ``benchmark``.
        item_cache: the items' vectors through a disk cache (``CandidateRetriever``); None = in memory.
        ranking: the ``retrieval.candidate_ranking`` block, built (None: ``DenseRanking``).
    """
    if pool not in ("candidates", "benchmark"):
        raise ValueError(f"retriever.pool must be candidates | benchmark, got {pool!r}")
    if retrieval.get("corpus"):
        log.warning("retrieval.corpus=%s is read by retriever=corpus only; retriever=%s ranks the benchmark's "
                    "own items", retrieval.get("corpus"), pool)  # fmt: skip
    pools: Mapping[str, Sequence[str]] = bench.candidates
    if pool == "benchmark":  # every item of the loaded file is a candidate of every question (small sets)
        every = list(bench.items)
        pools = {q.id: every for q in bench.questions}
    # Routing among the modalities the pool holds; a single-modality benchmark needs no router call.
    modalities = sorted({it.modality.value for it in bench.items.values()})
    router = LLMModalityRouter(llm, modalities) if retrieval.get("routing") and len(modalities) > 1 else None
    return CandidateRetriever(
        bench.items, pools, encoder, hierarchy, router=router, ranking=ranking, item_cache=item_cache
    )
