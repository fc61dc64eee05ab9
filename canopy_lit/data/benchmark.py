"""``load_benchmark``: read a registered benchmark (``data/base.py``) from its file or the bundled sample.

``Benchmark``, ``BenchmarkSpec`` and the registry live in ``canopy_lit.data.base`` (re-exported here).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from canopy_lit.data.base import (
    BENCHMARKS,
    Benchmark,
    BenchmarkSpec,
    bundled_benchmarks,
    project_data_dir,
    register_benchmark,
    resolve_reader,
)
from canopy_lit.data.readers import hf
from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.types import Item


def load_extra_items(path: str | Path, root: str | Path | None = None) -> list[Item]:
    """``Item`` records (a JSON list, ``Item.to_dict`` layout) to add to a benchmark's pool.

    Relative ``image`` / ``video.path`` fields resolve under ``root`` (default: the file's folder).
    Raises ``DataFormatError`` naming the file and record for anything that is not a valid item.
    """
    path = Path(path)
    base = Path(root) if root is not None else path.parent
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataFormatError(path, f"not JSON ({err})") from err
    if not isinstance(records, list):
        raise DataFormatError(path, "expected a JSON list of item records")
    items = []
    for n, rec in enumerate(records):
        try:
            rec = dict(rec)
            if rec.get("image") and not Path(rec["image"]).is_absolute():
                rec["image"] = str(base / rec["image"])
            video = rec.get("video")
            if isinstance(video, dict) and video.get("path") and not Path(video["path"]).is_absolute():
                rec["video"] = {**video, "path": str(base / video["path"])}
            items.append(Item.from_dict(rec))
        except (TypeError, ValueError, KeyError) as err:
            raise DataFormatError(path, str(err), n, rec.get("id") if isinstance(rec, dict) else None) from err
    return items


def load_benchmark(
    name: str,
    path: str | Path | None = None,
    extra_items: str | Path | None = None,
    extra_items_root: str | Path | None = None,
    reader: str | Callable[..., Benchmark] | None = None,
    **options: Any,
) -> Benchmark:
    """Read a benchmark file (or the bundled sample when ``path`` is None).

    Args:
        name: a key of ``BENCHMARKS`` (hotpotqa, 2wikimultihopqa, musique, nq, ottqa,
            tatqa, mmqa, lvbench, vragbench, custom, hf); with ``reader``, any label.
        path: a file in the benchmark's official format (HotpotQA also takes a folder
            of files; ``*train*`` files become the train split, others test), or, for hotpotqa,
            nq, 2wikimultihopqa and musique, a Hugging Face ``save_to_disk`` folder or parquet
            file(s) in the hub layout (``readers/hf.py``; ``name="hf"`` with ``layout=`` also reads JSONL).
        extra_items: a JSON list of ``Item`` records added to the pool (e.g. the bundled photos as
            image distractors next to LVBench videos; ``retriever=benchmark`` ranks them all).
        extra_items_root: folder that relative media paths of ``extra_items`` resolve under.
        reader: read with this reader instead of the registry entry of ``name``: a key of ``BENCHMARKS``
            or a dotted path (``mypkg.readers.MyBench``, see ``resolve_reader``), so a benchmark outside
            the package needs no registry edit. A reader with a ``name`` argument gets ``name``
            (item-id prefix and ``Question.benchmark``).
        **options: reader options (e.g. OTT-QA ``tables``, LVBench ``video_root``);
            relative paths in the registry defaults resolve under the data folder.

    Raises:
        KeyError: unknown benchmark.
        ValueError: unknown reader option.
        FileNotFoundError: missing file.
        DataFormatError: malformed record (message names file and record).
        ImportError: ``reader`` does not import.
    """
    key = name.lower()
    if reader is not None and key in BENCHMARKS and reader == BENCHMARKS[key].reader:
        reader = None  # the benchmark's own reader, as its config names it: its registry entry (bundled path, defaults)
    if reader is None:
        if key not in BENCHMARKS:
            raise KeyError(
                f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))} "
                "(or name its reader: reader=<registered name | dotted path>)"
            )
        spec = BENCHMARKS[key]
    else:
        registered = isinstance(reader, str) and reader.lower() in BENCHMARKS
        base = BENCHMARKS[reader.lower()] if registered else None  # type: ignore[union-attr]
        read = resolve_reader(reader)
        label = {"name": name} if "name" in inspect.signature(read).parameters else {}
        spec = BenchmarkSpec(
            read,
            base.bundled if base else None,
            base.description if base else f"read by {reader}",
            {**(base.defaults if base else {}), **label},
        )
        key = reader.lower() if registered else key  # type: ignore[union-attr]
    if path is not None and key in hf.LAYOUTS and hf.is_hf_dataset(path):
        # A save_to_disk folder or parquet files in the hub layout of this benchmark: same questions and gold.
        spec = BenchmarkSpec(hf.read, None, spec.description, {"name": spec.defaults.get("name", key)})
    data_dir = project_data_dir()
    if path is None:
        if spec.bundled is None:
            raise FileNotFoundError(
                f"benchmark {key!r} has no bundled data: pass its file (data.path=FILE; path= in Python)"
            )
        path = data_dir / spec.bundled
    kwargs: dict[str, Any] = {}
    for k, v in spec.defaults.items():
        # Registry defaults name bundled files relative to the data folder.
        kwargs[k] = str(data_dir / v) if isinstance(v, str) and k != "name" else v
    kwargs.update({k: v for k, v in options.items() if v is not None})
    read = spec.read_fn()
    accepted = set(inspect.signature(read).parameters) - {"path"}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise ValueError(
            f"benchmark {key!r}: unknown reader option(s) {unknown}; accepted: {sorted(accepted)}"
        )
    bench = read(Path(path), **kwargs)
    bench.meta.setdefault("path", str(path))
    if reader is not None:
        bench.meta.setdefault("reader", reader if isinstance(reader, str) else getattr(reader, "__qualname__", ""))
    if extra_items is not None:
        extra = load_extra_items(extra_items, extra_items_root)
        clash = sorted(i.id for i in extra if i.id in bench.items)
        if clash:
            raise ValueError(f"{extra_items}: item ids already in {key!r}: {clash[:5]}")
        bench.items.update({i.id: i for i in extra})
        bench.meta["extra_items"] = str(extra_items)
    return bench


__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "BenchmarkSpec",
    "bundled_benchmarks",
    "load_benchmark",
    "load_extra_items",
    "project_data_dir",
    "register_benchmark",
    "resolve_reader",
]
