"""Static HTML evidence viewer for one run: ``python -m canopy_lit.report view RUN_DIR [--out DIR]``.

One self-contained ``index.html`` (inline CSS and a few lines of JS, no server, no CDN): per
question, each retrieved item with its kept regions highlighted and dropped regions faded,
gold regions outlined, the tree decisions (keep / split / drop per visited node), the
critic's verdict and follow-up query per round, and the answer vs the gold answers.

The run records hold leaf ranges, not text, so items are rebuilt from the benchmark file
the run read (``data.name`` / ``data.path`` of ``.hydra/config.yaml``, or ``--benchmark`` /
``--data-path``); an item's leaves do not depend on B, so the ranges index them exactly.
Items of other bundled benchmarks (a unified-corpus run) are found by their id prefix.
"""

from __future__ import annotations

import html
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from canopy_lit.data import BENCHMARKS, DataFormatError, load_benchmark, project_data_dir
from canopy_lit.eval.records import cfg_get, read_predictions, read_run_axes, run_axes
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.report.decisions import tree_shape
from canopy_lit.report.runs import load_config
from canopy_lit.types import Item, Leaf, Modality, Question

log = logging.getLogger(__name__)


class ItemResolver:
    """Item and question lookup for a run: the run's benchmark file, then bundled benchmarks by id prefix.

    Args:
        benchmark: the run's benchmark name (None = resolve by id prefix only).
        path: the file the run read (None = the bundled sample).
        options: reader options from the run's data config (e.g. OTT-QA ``tables``).
    """

    def __init__(self, benchmark: str | None, path: str | None = None, options: Mapping[str, Any] | None = None) -> None:
        self.benchmark = benchmark
        self.path = path
        self.options = dict(options or {})
        self._benches: dict[str, Any] = {}
        self._questions: dict[str, dict[str, Question]] = {}
        self.errors: dict[str, str] = {}

    def _load(self, name: str) -> Any | None:
        if name in self._benches or name in self.errors:
            return self._benches.get(name)
        if name not in BENCHMARKS:
            self.errors[name] = f"unknown benchmark {name!r}"
            return None
        try:
            if name == self.benchmark:
                bench = load_benchmark(name, self.path, **self.options)
            else:
                bench = load_benchmark(name)
        except Exception as err:  # noqa: BLE001 - shown in the page; the viewer still renders what it has
            self.errors[name] = f"{type(err).__name__}: {err}"
            log.warning("cannot load benchmark %s: %s", name, err)
            return None
        self._benches[name] = bench
        return bench

    def item(self, item_id: str) -> Item | None:
        names = [self.benchmark] if self.benchmark else []
        prefix = item_id.split(":", 1)[0] if ":" in item_id else None
        if prefix and prefix not in names:
            names.append(prefix)
        for name in names:
            bench = self._load(name)
            if bench is not None and item_id in bench.items:
                return bench.items[item_id]
        return None

    def question(self, qid: str, benchmark: str | None = None) -> Question | None:
        name = benchmark or self.benchmark
        bench = self._load(name) if name else None
        if bench is None:
            return None
        if name not in self._questions:
            self._questions[name] = {q.id: q for q in bench.questions}
        return self._questions[name].get(qid)


# --- per-item rendering ---------------------------------------------------------------------------


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


# Per-question scores that are counts, shown as they are; every other score is a share, shown in %.
COUNT_SCORES = frozenset({"tokens"})


def _number(rec: Mapping[str, Any], field: str, value: Any, source: str | Path | None) -> float:
    """A record field the page computes with, as a float; anything else is an error naming file, record and field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataFormatError(source or "predictions.jsonl", f"{field}: expected a number, got {json.dumps(value)[:60]}",
                              record_id=rec.get("id"))  # fmt: skip
    return float(value)


def _mapping(rec: Mapping[str, Any], field: str, source: str | Path | None) -> Mapping[str, Any]:
    value = rec.get(field) or {}
    if not isinstance(value, Mapping):
        raise DataFormatError(source or "predictions.jsonl", f"{field}: expected a JSON object, got {json.dumps(value)[:60]}",
                              record_id=rec.get("id"))  # fmt: skip
    return value


def outcome(scores: Mapping[str, Any]) -> tuple[str, float | None]:
    """(label, hit) of a question: EM, else choice accuracy, else (an evidence run) answer recall; hit None
    when the record has none of them."""
    for key, label in (("em", "EM"), ("accuracy", "accuracy"), ("answer_recall", "answer recall")):
        if key in scores:
            return label, scores[key]
    return "", None


def leaf_states(n_leaves: int, leaf_ranges: Sequence[Sequence[int]]) -> list[bool]:
    """Per leaf: kept (inside a retained range) or dropped."""
    kept = [False] * n_leaves
    for s, e in leaf_ranges:
        for i in range(max(0, int(s)), min(n_leaves, int(e))):
            kept[i] = True
    return kept


def _leaf_html(item: Item, leaves: Sequence[Leaf], kept: Sequence[bool], gold: set[int], data_dir: Path, out_dir: Path) -> str:
    def cls(i: int) -> str:
        return ("kept" if kept[i] else "drop") + (" gold" if i in gold else "")

    mod = item.modality
    if mod == Modality.TABLE and item.table is not None:
        head = "".join(f"<th>{_esc(h)}</th>" for h in item.table.header)
        rows = []
        for i, row in enumerate(item.table.rows):
            cells = "".join(f"<td>{_esc(c)}</td>" for c in row)
            rows.append(f'<tr class="{cls(i)}" title="row {i}"><td class="ix">{i}</td>{cells}</tr>')
        cap = f"<caption>{_esc(item.table.caption)}</caption>" if item.table.caption else ""
        return f'<table class="tbl">{cap}<tr><th class="ix">#</th>{head}</tr>{"".join(rows)}</table>'
    if mod == Modality.IMAGE and item.image:
        src = Path(item.image)
        if not src.is_absolute():
            src = data_dir / src
        rel = os.path.relpath(src, out_dir)
        return f'<div class="{cls(0)}"><img src="{_esc(rel)}" alt="{_esc(item.title)}"><br>{_esc(item.title)}</div>'
    if mod == Modality.VIDEO:
        clips = [
            f'<span class="clip {cls(i)}" title="leaf {i}">{leaf.t_start:.0f}-{leaf.t_end:.0f} s</span>'
            for i, leaf in enumerate(leaves)
        ]
        path = item.video.path if item.video else ""
        return f'<div class="video"><code>{_esc(path)}</code><br>{" ".join(clips)}</div>'
    spans = [f'<span class="{cls(i)}" title="sentence {i}">{_esc(leaf.text)}</span>' for i, leaf in enumerate(leaves)]
    return f'<p class="text">{" ".join(spans)}</p>'


def decisions_html(n_leaves: int, branching: int, leaf_ranges: Sequence[Sequence[int]]) -> str:
    """The visited nodes of an item's tree as an indented list: [start, end) keep / split / drop."""
    try:
        tree = tree_shape(n_leaves, branching)
        kept = {tree.find(int(s), int(e)) for s, e in leaf_ranges}
    except (KeyError, ValueError) as err:
        return f'<div class="warn">tree decisions unavailable: {_esc(err)}</div>'
    split = {a for v in kept for a in tree.ancestors(v)}
    lines: list[str] = []

    def walk(v: int) -> None:
        if v in kept:
            state = "keep"
        elif v in split:
            state = "split"
        else:
            state = "drop"
        pad = "&nbsp;&nbsp;" * int(tree.depth[v])
        lines.append(f'<div class="node {state}">{pad}[{tree.starts[v]}, {tree.ends[v]}) {state}</div>')
        if v in split:
            for c in tree.children[v]:
                walk(c)

    walk(0)
    return "".join(lines)


def item_html(
    kept: Mapping[str, Any],
    resolver: ItemResolver,
    hierarchy: Hierarchy,
    branching: int,
    gold: Mapping[str, Sequence[int]],
    data_dir: Path,
    out_dir: Path,
) -> str:
    """One kept-item card: header, the item with kept/dropped regions, its tree decisions."""
    iid = str(kept.get("item_id", "?"))
    n = int(kept.get("n_leaves") or 0)
    ranges = [tuple(r) for r in kept.get("leaf_ranges") or []]
    item = resolver.item(iid)
    is_gold = iid in gold
    badge = ' <span class="badge goldb">gold item</span>' if is_gold else ""
    agg = ' <span class="badge">aggregation: whole table</span>' if kept.get("aggregation") else ""
    tok = f"{kept.get('kept_tokens', '?')} / {kept.get('item_tokens', '?')} tokens kept"
    head = (
        f'<div class="ihead"><b>{_esc(item.title if item and item.title else iid)}</b> '
        f'<span class="mod">{_esc(kept.get("modality", "?"))}</span>{badge}{agg} '
        f'<span class="dim">{_esc(iid)} · leaves {_esc(ranges)} of {n} · {_esc(tok)}</span></div>'
    )
    if item is None:
        body = '<div class="warn">item text not available (benchmark file not found); kept leaf ranges above</div>'
    else:
        leaves = hierarchy.builder(item.modality).leaves(item)
        warn = ""
        if len(leaves) != n:
            warn = (f'<div class="warn">the item now has {len(leaves)} leaves, the run saw {n}: '
                    "the data file differs from the run's</div>")
        body = warn + _leaf_html(item, leaves, leaf_states(len(leaves), ranges), set(gold.get(iid) or []), data_dir, out_dir)
    tree = f"<details class=\"tree\"><summary>tree decisions (B={branching})</summary>{decisions_html(n, branching, ranges)}</details>" if n else ""
    return f'<div class="item{" isgold" if is_gold else ""}">{head}{body}{tree}</div>'


def _controller_html(ctrl: Mapping[str, Any] | None, is_last: bool) -> str:
    if not ctrl:
        return '<div class="critic dim">no controller call after this round' + (" (last round: the reader answers)" if is_last else "") + "</div>"
    stop = ctrl.get("stop")
    verdict = "sufficient: stop" if stop else "insufficient: retrieve again"
    parts = [f'<b class="{"ok" if stop else "bad"}">critic: {verdict}</b>']
    if ctrl.get("followup") and not stop:
        parts.append(f"follow-up query: <q>{_esc(ctrl['followup'])}</q>")
    for k, v in ctrl.items():
        if k not in ("stop", "followup") and v not in (None, "", [], {}):
            shown = v if isinstance(v, str) else f"{v:.3f}" if isinstance(v, float) else json.dumps(v, ensure_ascii=False)
            parts.append(f"{_esc(k)}: {_esc(shown)}")
    return '<div class="critic">' + "<br>".join(parts) + "</div>"


def question_html(
    rec: Mapping[str, Any],
    resolver: ItemResolver,
    hierarchy: Hierarchy,
    branching: int,
    data_dir: Path,
    out_dir: Path,
    open_: bool = False,
    source: str | Path | None = None,
) -> str:
    """One question's section; ``source`` (the predictions file) names where a field that must be a number is not."""
    q = resolver.question(str(rec.get("id")), rec.get("benchmark") or None)
    gold = q.gold if q else {}
    scores = {k: _number(rec, f"scores.{k}", v, source) for k, v in _mapping(rec, "scores", source).items()}
    score = " ".join(
        f"{k.upper()} {v:g}" if k in COUNT_SCORES else f"{k.upper()} {100 * v:.0f}" for k, v in scores.items()
    )
    status = rec.get("status", "ok")
    calls = {k: _number(rec, f"llm_calls.{k}", v, source) for k, v in _mapping(rec, "llm_calls", source).items()}
    label, hit = outcome(scores)
    # The badge says how the question did, not only that it ran: a run that found no answer is not "ok".
    if status != "ok":
        badge = f'<span class="st bad">{_esc(status)}</span>'
    elif hit is None:
        badge = f'<span class="st na">{_esc(status)}</span>'
    else:
        badge = f'<span class="st {"ok" if hit else "bad"}">{_esc(label)} {100 * hit:.0f}</span>'
    summary = (
        f'{badge} '
        f'<span class="qid">{_esc(rec.get("id"))}</span> {_esc(rec.get("question", ""))} '
        f'<span class="dim">· {_esc(score)} · {_esc(rec.get("evidence_tokens", 0))} tokens · '
        f'{len(rec.get("rounds") or [])} round(s) · {sum(calls.values()):g} LLM call(s)</span>'
    )
    answers = " | ".join(str(a) for a in rec.get("answers") or [])
    ans = (
        f'<div class="answer"><div><b>prediction:</b> <span class="{"ok" if hit else "bad"}">'
        f'{_esc(rec.get("prediction") or "")}</span></div><div><b>gold:</b> {_esc(answers)}</div>'
    )
    if q and q.choices:
        ans += "<div><b>choices:</b> " + " ".join(_esc(c) for c in q.choices) + "</div>"
    if rec.get("error"):
        ans += f'<div class="warn">error: {_esc(rec["error"])}</div>'
    if gold:
        held = {k.get("item_id") for rd in rec.get("rounds") or [] for k in rd.get("kept") or []}
        marks = " ".join(
            f'<span class="{"ok" if iid in held else "bad"}">{"✓" if iid in held else "✗"} {_esc(iid)}</span>'
            for iid in gold
        )
        ans += f"<div><b>gold evidence</b> (✓ retrieved, ✗ missed): {marks}</div>"
    cost = ", ".join(f"{k} {v:g}" for k, v in calls.items())
    times = ", ".join(
        f"{k} {_number(rec, f'time_s.{k}', v, source):.2f}s" for k, v in _mapping(rec, "time_s", source).items()
    )
    latency = _number(rec, "latency_s", rec.get("latency_s", 0), source)
    ans += f'<div class="dim">LLM calls: {_esc(cost or "none")} · time: {_esc(times)} · latency {latency:.2f}s'
    if rec.get("truncated_items"):
        ans += f' · <span class="bad">{_esc(rec["truncated_items"])} item(s) cut by the reader cap</span>'
    ans += "</div></div>"
    rounds = rec.get("rounds") or []
    body = []
    for i, rd in enumerate(rounds):
        kept_ids = {k.get("item_id") for k in rd.get("kept") or []}
        retrieved = "".join(
            f'<span class="rid{"" if r in kept_ids else " dup"}">{_esc(r)}</span>' for r in rd.get("retrieved") or []
        )
        items = "".join(item_html(k, resolver, hierarchy, branching, gold, data_dir, out_dir) for k in rd.get("kept") or [])
        body.append(
            f'<div class="round"><h4>round {int(rd.get("round", i)) + 1}: <q>{_esc(rd.get("query", ""))}</q></h4>'
            f'<div class="dim">retrieved {len(rd.get("retrieved") or [])}, duplicates (already held, struck out) '
            f'{_esc(rd.get("duplicates", 0))}: {retrieved}</div>{items}'
            f"{_controller_html(rd.get('controller'), i == len(rounds) - 1)}</div>"
        )
    if not rounds:
        body.append('<div class="dim">no retrieval rounds</div>')
    text = _esc(f"{rec.get('id')} {rec.get('question', '')} {rec.get('prediction', '')}".lower())
    return (
        f'<details class="q" data-text="{text}" data-status="{_esc(status)}" data-hit="{1 if hit else 0}"'
        f'{" open" if open_ else ""}><summary>{summary}</summary>{ans}{"".join(body)}</details>'
    )


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:16px;color:#222}
h1{font-size:20px;margin:0 0 4px} .dim{color:#777;font-size:12px} q{font-style:italic}
.legend span{margin-right:12px} .bar{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #ddd;z-index:2}
details.q{border:1px solid #ddd;border-radius:6px;margin:10px 0;padding:6px 10px}
details.q>summary{cursor:pointer;font-weight:500} .qid{font-family:monospace;font-size:12px;color:#555}
.st{font-size:11px;padding:1px 6px;border-radius:8px;color:#fff}.st.ok{background:#2e7d32}.st.bad{background:#c62828}
.st.na{background:#78909c}
.ok{color:#2e7d32}.bad{color:#c62828} .st.ok,.st.bad,.st.na{color:#fff} .answer{background:#f6f6f6;padding:6px 8px;border-radius:4px;margin:6px 0}
.round{border-left:3px solid #90a4ae;padding-left:10px;margin:10px 0} .round h4{margin:4px 0}
.item{border:1px solid #e0e0e0;border-radius:4px;padding:6px 8px;margin:6px 0} .item.isgold{border-color:#f9a825}
.ihead{margin-bottom:4px} .mod,.badge{font-size:11px;background:#eceff1;padding:1px 5px;border-radius:6px}
.goldb{background:#fff3c4} .kept{background:#c8f7c5} .drop{opacity:.38} .gold{outline:2px solid #f9a825;outline-offset:-1px}
p.text span{padding:1px 0} .tbl{border-collapse:collapse;font-size:12px} .tbl td,.tbl th{border:1px solid #ddd;padding:2px 5px}
.tbl th{background:#fafafa} .ix{color:#999} .clip{display:inline-block;padding:1px 4px;margin:1px;border-radius:3px}
.rid{font-family:monospace;font-size:11px;margin-right:6px}.rid.dup{text-decoration:line-through;color:#999}
.critic{background:#eef4fb;padding:5px 8px;border-radius:4px;margin-top:6px}
.tree{font-family:monospace;font-size:11px;margin-top:4px} .node.keep{color:#2e7d32;font-weight:600}
.node.split{color:#b28704}.node.drop{color:#c62828} .warn{color:#b71c1c;font-size:12px} img{max-width:320px}
"""

JS = """
function filt(){var t=document.getElementById('f').value.toLowerCase(),m=document.getElementById('m').value;
document.querySelectorAll('details.q').forEach(function(d){var ok=d.dataset.text.indexOf(t)>=0;
if(m=='failed')ok=ok&&d.dataset.status!='ok';if(m=='wrong')ok=ok&&d.dataset.hit=='0';if(m=='right')ok=ok&&d.dataset.hit=='1';
d.style.display=ok?'':'none';});}
function all(o){document.querySelectorAll('details.q').forEach(function(d){if(d.style.display!='none')d.open=o;});}
"""


def _data_options(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Reader options of the run's data config (``data.options``), unresolvable values left out."""
    opts = cfg_get(cfg, "data.options") or {}
    return {k: v for k, v in opts.items() if v is not None and not (isinstance(v, str) and "${" in v)}


def build_viewer(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    benchmark: str | None = None,
    data_path: str | None = None,
    branching: int | None = None,
    limit: int | None = None,
    open_first: int = 1,
) -> Path:
    """Write ``<out_dir>/index.html`` for the run in ``run_dir`` (default out_dir: ``run_dir/viewer``).

    Args:
        run_dir: an evaluation run folder (``predictions.jsonl``; ``.hydra/config.yaml`` optional).
        benchmark: override the run's benchmark (``run.json``) / ``data.path`` (its config).
        data_path: see ``benchmark``.
        branching: override the run's B (for the tree decisions).
        limit: render only the first N questions.
        open_first: questions expanded on load.

    Raises:
        FileNotFoundError: no ``predictions.jsonl`` in ``run_dir``.
    """
    run_dir = Path(run_dir)
    preds = run_dir / "predictions.jsonl"
    if not preds.is_file():
        raise FileNotFoundError(f"{run_dir}: no predictions.jsonl (not an evaluation run folder?)")
    cfg = load_config(run_dir)
    axes = read_run_axes(run_dir) or run_axes(cfg)
    records = read_predictions(preds)  # one record per question id
    if limit is not None:
        records = records[:limit]
    name = benchmark or axes.get("benchmark") or next((r.get("benchmark") for r in records if r.get("benchmark")), None)
    path = data_path or cfg_get(cfg, "data.path")
    resolver = ItemResolver(name, path, _data_options(cfg) if not data_path else {})
    b = int(branching or axes.get("B") or 2)
    hierarchy = Hierarchy(b)
    out = Path(out_dir) if out_dir else run_dir / "viewer"
    out.mkdir(parents=True, exist_ok=True)
    data_dir = project_data_dir()
    metrics: dict[str, Any] = {}
    if (run_dir / "metrics.json").is_file():
        metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    shown = ("eval/n", "eval/failed", "eval/em", "eval/f1", "eval/accuracy", "eval/evidence_tokens", "eval/llm_calls",
             "eval/rounds", "eval/followup_duplicate_rate", "eval/duplicate_rate_all_rounds")
    mline = " · ".join(f"{k.split('/')[1]} {metrics[k]:.3g}" for k in shown if isinstance(metrics.get(k), (int, float)))
    setting = " · ".join(
        f"{k} {v}"
        for k, v in (
            ("method", axes.get("method")),
            ("benchmark", name),
            ("k", axes.get("k")),
            ("B", b),
            ("R", axes.get("R")),
            ("refine", axes.get("refine")),
            ("scorer", axes.get("scorer")),
            ("adapter", axes.get("adapter") or ("null" if cfg_get(cfg, "encoder") else None)),
        )
        if v is not None
    )
    qs = [question_html(r, resolver, hierarchy, b, data_dir, out, i < open_first, preds) for i, r in enumerate(records)]
    errors = "".join(f'<div class="warn">could not load {_esc(k)}: {_esc(v)}</div>' for k, v in resolver.errors.items())
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Evidence viewer: {_esc(run_dir.name)}</title>
<style>{CSS}</style><script>{JS}</script></head><body>
<h1>Evidence viewer</h1>
<div class="dim">{_esc(run_dir)}</div>
<div>{_esc(setting)}</div><div class="dim">{_esc(mline)}</div>{errors}
<div class="bar"><input id="f" placeholder="filter: id, question, prediction" oninput="filt()" size="40">
<select id="m" onchange="filt()"><option value="">all</option><option value="wrong">wrong (EM/acc/answer recall 0)</option>
<option value="right">right</option><option value="failed">failed</option></select>
<button onclick="all(true)">expand</button><button onclick="all(false)">collapse</button>
<span class="legend dim"><span class="kept">kept region</span><span class="drop">dropped region</span>
<span class="gold">gold region</span><span class="rid dup">duplicate</span></span></div>
{"".join(qs)}
<p class="dim">{len(records)} question(s). Generated by canopy_lit.report from the run folder; no server needed.</p>
</body></html>
"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
