"""OTT-QA reader: traced questions + their table + the table's linked passages.

Questions (``dev.traced.json``/``train.traced.json``): ``{"question_id", "question",
"table_id", "answer-text", "answer-node": [[text, [row, col], link | null, "table" | "passage"]]}``.

Tables/passages (``tables=``), either the bundled gathered file
``{"tables": {table_id: table}, "passages": {table_id: {link: text}}}`` or a plain
``{table_id: table}`` file with ``passages=`` a ``{table_id: {link: text}}`` or a flat
``{link: text}`` file (the official ``all_passages.json``). A table is
``{"title", "header": [[name, links]], "data": [[[text, links]]], "section_title", ...}``.

Items: the table (rows are leaves; caption = section title) and its linked
passages (sentences). Gold: the rows of ``"table"`` answer nodes; for
``"passage"`` answer nodes the linked passage, at the sentences holding the
answer text (``bridge_rows=True`` also marks the table row that links to it).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers._gold import locate_sentences
from canopy_lit.data.readers._io import DataFormatError, iter_records, load_json, record_guard, require
from canopy_lit.types import Item, Modality, Question, Table


def _cell(cell: Any) -> tuple[str, list[str]]:
    """``[text, links]`` (or a bare string) -> (text, links)."""
    if isinstance(cell, str):
        return cell, []
    if isinstance(cell, list) and cell and isinstance(cell[0], str):
        links = cell[1] if len(cell) > 1 and isinstance(cell[1], list) else []
        return cell[0], [str(x) for x in links]
    raise TypeError(f"table cell must be [text, links] or text, got {cell!r:.60}")


def link_title(link: str) -> str:
    """'/wiki/Prime_Suspect' -> 'Prime Suspect'."""
    return unquote(link.rsplit("/wiki/", 1)[-1]).replace("_", " ")


def _load_sources(tables: str | Path | None, passages: str | Path | None) -> tuple[dict, dict, bool]:
    """(tables by id, passages, passages_per_table) from the accepted layouts."""
    if tables is None:
        raise FileNotFoundError(
            "OTT-QA needs tables=<tables json(.gz)> (the bundled dev_tables_passages.json.gz)"
        )
    data = load_json(tables)
    if not isinstance(data, dict):
        raise DataFormatError(tables, "expected an object of tables")
    if "tables" in data and isinstance(data["tables"], dict):
        table_map, pas = data["tables"], data.get("passages", {})
    else:
        table_map, pas = data, {}
    if passages is not None:
        pas = load_json(passages)
        if not isinstance(pas, dict):
            raise DataFormatError(passages, "expected an object of passages")
    per_table = any(isinstance(v, dict) for v in list(pas.values())[:10])
    return table_map, pas, per_table


def read(
    path: Path,
    tables: str | Path | None = None,
    passages: str | Path | None = None,
    bridge_rows: bool = False,
    strict: bool = True,
) -> Benchmark:
    """Read OTT-QA traced questions with their tables and linked passages.

    Args:
        path: ``*.traced.json`` (or any list of questions in that layout).
        tables: tables file (see module docstring). passages: optional separate passages file.
        bridge_rows: also mark the table row whose cell links to a gold passage.
        strict: raise on malformed records (default) or count them in ``skipped["malformed"]``.
    """
    table_map, pas, per_table = _load_sources(tables, passages)
    items: dict[str, Item] = {}
    skipped: Counter = Counter()
    bench = Benchmark("ottqa", [], items, {}, skipped, {"path": str(path), "tables": str(tables)})
    table_cands: dict[str, list[str]] = {}
    leaf_cache: dict = {}  # passages recur across questions: split each once

    def table_item(table_id: str) -> list[str]:
        """Create the table item and its passage items once; return the candidate ids."""
        if table_id in table_cands:
            return table_cands[table_id]
        raw = table_map[table_id]
        where = f"table {table_id!r} of {tables}"
        try:
            header = [_cell(h)[0] for h in raw["header"]]
            cells = [[_cell(c) for c in row] for row in raw["data"]]
        except (KeyError, TypeError) as err:
            raise DataFormatError(where, f"malformed table ({err})") from err
        tid = f"ottqa:{table_id}"
        items[tid] = Item(
            tid,
            Modality.TABLE,
            title=str(raw.get("title", "")),
            table=Table(
                header, [[t for t, _ in row] for row in cells], caption=str(raw.get("section_title", ""))
            ),
            meta={k: raw[k] for k in ("url", "section_text", "intro") if raw.get(k)},
        )
        if per_table:
            linked = pas.get(table_id, {})
        else:  # flat {link: text}: the links that occur in this table
            links = {link for row in cells for _, ls in row for link in ls}
            linked = {link: pas[link] for link in sorted(links) if link in pas}
        out = [tid]
        for link, text in linked.items():
            pid = f"ottqa:{link}"
            if pid not in items and isinstance(text, str) and text.strip():
                items[pid] = Item(pid, Modality.TEXT, title=link_title(link), text=text, meta={"link": link})
            if pid in items:
                out.append(pid)
        table_cands[table_id] = out
        return out

    for index, rec in enumerate(iter_records(path)):
        with record_guard(path, index, rec, skipped, strict):
            qid = str(require(rec, "question_id", str))
            if bench.repeats_question(qid):
                continue
            text = require(rec, "question", str)
            table_id = require(rec, "table_id", str)
            answer = rec.get("answer-text")
            answers = [str(answer)] if answer is not None else []
            if table_id not in table_map:
                skipped["table_missing"] += 1
                bench.add_question(Question(qid, text, answers, "ottqa", {}, meta={"doc": f"ottqa:{table_id}"}), [])
                continue
            cands = table_item(table_id)
            tid = cands[0]
            n_rows = len(items[tid].table.rows)  # type: ignore[union-attr]
            gold: dict[str, set[int]] = {}
            nodes = rec.get("answer-node")
            if nodes is None:
                skipped["no_gold_annotation"] += 1
            for node in nodes or []:
                if not isinstance(node, list) or len(node) < 4:
                    raise TypeError(
                        f"answer-node entry must be [text, [row, col], link, kind], got {node!r:.80}"
                    )
                _, (row, _col), link, kind = node[:4]
                if kind == "table" or (bridge_rows and kind == "passage"):
                    if isinstance(row, int) and 0 <= row < n_rows:
                        gold.setdefault(tid, set()).add(row)
                    else:
                        skipped["answer_row_out_of_range"] += 1
                if kind == "passage":
                    pid = f"ottqa:{link}"
                    if pid not in items:
                        skipped["answer_passage_missing"] += 1
                        continue
                    leaves = locate_sentences(items[pid], answers, leaf_cache)
                    if not leaves:
                        skipped["gold_span_not_located"] += 1
                    gold.setdefault(pid, set()).update(leaves)
                elif kind != "table":
                    raise ValueError(f"answer-node kind must be 'table' or 'passage', got {kind!r}")
            meta = {"doc": f"ottqa:{table_id}"}
            bench.add_question(
                Question(qid, text, answers, "ottqa", {k: sorted(v) for k, v in gold.items()}, meta=meta), cands
            )
    return bench
