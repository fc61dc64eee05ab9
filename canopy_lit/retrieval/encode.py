"""Corpus encoding with Lightning ``Trainer.predict``: the same code encodes on one CPU or N GPUs (DDP).

Each rank streams its batches into a ``EmbeddingShardWriter`` that saves every ``shard_size``
embeddings as ``<out_dir>/shard-r<rank>-<seq>.npy`` plus the matching ``.ids.json``. A shard is
finished once its ``.npy`` exists (written last, atomically). Restarting ``encode_corpus`` on the
same folder skips every item of a finished shard, so a half-finished encode resumes where it was.

On SIGTERM (a scheduler's pre-emption, ``kill``, ``timeout``) the batch in flight is finished, the
buffered embeddings are saved as one more (smaller) shard, and the process exits with status 143 and a
line saying what was saved; the next run skips it. The corpus size is logged before encoding starts,
and a progress bar (total, rate, ETA) runs unless ``progress=False``.

Items are read lazily: the pending corpus rows (8 B each) are cut into chunks of ``chunk_size`` items, and a
chunk is read from the corpus file and rendered only when its first batch is asked for (longest first
inside the chunk: little padding per batch). With W ranks each rank walks its own contiguous run of
chunks, so no process ever holds more than one chunk of rendered inputs, whatever the corpus size.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter, Callback
from torch.utils.data import DataLoader, Dataset

from canopy_lit.hierarchy import Hierarchy, NodeInput
from canopy_lit.retrieval.corpus import CorpusStore, render_item
from canopy_lit.retrieval.embedding_shards import embedding_shards, shard_ids_path

log = logging.getLogger(__name__)

META = "meta.json"
SIGTERM_EXIT = 143  # 128 + SIGTERM, what a shell reports for a process ended by SIGTERM


class EncodeInterrupted(SystemExit):
    """SIGTERM arrived during ``encode_corpus``; the shard in progress was saved first.

    A ``SystemExit`` (status 143) so that an uncaught one ends the process the way SIGTERM would, after
    the message (``str(err)``) has been printed; catch it to do more cleanup.
    """

    def __init__(self, message: str) -> None:
        super().__init__(SIGTERM_EXIT)
        self.message = message

    def __str__(self) -> str:
        return self.message


class _StopAfterShard(Exception):
    """Raised inside ``Trainer.predict`` to leave the loop once the partial shard is saved."""


def f0_fingerprint(encoder: Any) -> str:
    """Fingerprint of the encoder with its adapter disabled (what f0 embeddings depend on)."""
    fp = str(encoder.fingerprint)
    return fp.rsplit(":adapter=", 1)[0] + ":adapter=none" if ":adapter=" in fp else fp


class _LazyBatches(Dataset):
    """Dataset item j = one tokenised batch ``(ids, tokens, n_truncated)`` of the pending corpus rows.

    Batch b covers pending positions [b·batch_size, (b+1)·batch_size) of its chunk after the chunk is sorted
    longest first; only the current chunk is held rendered. Lightning's distributed sampler gives rank r the
    items r, r + W, r + 2W ... in order; item j is mapped to batch (j mod W)·S + j div W (S = batches per
    rank), so each rank reads a contiguous run of chunks. Items past the last batch repeat it (the
    sampler needs W·S items; the repeats are ignored when the shards are read, as DDP padding always was).
    """

    def __init__(
        self,
        corpus: CorpusStore,
        rows: np.ndarray,
        encoder: Any,
        hierarchy: Hierarchy,
        batch_size: int,
        chunk_size: int,
        world_size: int = 1,
    ) -> None:
        self.corpus, self.rows, self.encoder, self.hierarchy = corpus, rows, encoder, hierarchy
        self.batch_size = batch_size
        self.chunk = max(1, math.ceil(chunk_size / batch_size)) * batch_size  # whole batches per chunk
        self.world = max(1, int(world_size))
        self.n_batches = math.ceil(len(rows) / batch_size)
        self.per_rank = math.ceil(self.n_batches / self.world)
        self._chunk_id = -1
        self._ids: list[str] = []
        self._inputs: list[NodeInput | str] = []

    def __len__(self) -> int:
        return self.per_rank * self.world

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_chunk_id": -1, "_ids": [], "_inputs": []}  # workers render their own

    def _load_chunk(self, c: int) -> None:
        rows = self.rows[c * self.chunk : (c + 1) * self.chunk].tolist()
        inputs = [render_item(self.corpus.item_at(r), self.hierarchy) for r in rows]
        order = sorted(range(len(rows)), key=lambda i: -self.encoder.input_length(inputs[i]))
        self._ids = [self.corpus.ids[rows[i]] for i in order]
        self._inputs = [inputs[i] for i in order]
        self._chunk_id = c

    def __getitem__(self, j: int) -> tuple[list[str], dict[str, torch.Tensor], int]:
        b = (j % self.world) * self.per_rank + j // self.world
        repeat = b >= self.n_batches
        b = min(b, self.n_batches - 1)
        c, lo = divmod(b * self.batch_size, self.chunk)
        if c != self._chunk_id:
            self._load_chunk(c)
        ids = self._ids[lo : lo + self.batch_size]
        inputs = self._inputs[lo : lo + self.batch_size]
        cut = 0 if repeat else sum(getattr(self.encoder, "truncated", lambda x: [False] * len(x))(inputs))
        return ids, self.encoder.tokenize(inputs), cut


def _one_batch(items: list[Any]) -> Any:
    """``collate_fn`` of a DataLoader of batch size 1 over ``_LazyBatches`` (whose items are batches)."""
    return items[0]


class CorpusEncoderModule(LightningModule):
    """Predict-only wrapper: a tokenised batch -> (B, D) normalised embeddings.

    Args:
        encoder: a ``NodeEncoder``.
        role: ``"f0"`` (adapter disabled: the retriever's embedding, default) or ``"ftheta"`` (adapter on:
            used to precompute node embeddings).
    """

    def __init__(self, encoder: Any, role: str = "f0") -> None:
        super().__init__()
        if role not in {"f0", "ftheta"}:
            raise ValueError(f"encode role must be 'f0' or 'ftheta', got {role!r}")
        self.encoder, self.role = encoder, role

    def predict_step(self, batch: tuple[Any, ...], batch_idx: int) -> dict[str, Any]:
        ids, tokens = batch[0], batch[1]
        if self.role == "f0":
            with self.encoder.adapter_disabled():
                emb = self.encoder.embed(tokens)
        else:
            emb = self.encoder.embed(tokens)
        return {"ids": ids, "emb": emb.float().cpu().numpy(), "truncated": int(batch[2]) if len(batch) > 2 else 0}


class EmbeddingShardWriter(BasePredictionWriter):
    """Buffers batch outputs and saves fixed-size shards (``.npy`` + ``.ids.json``) per rank."""

    def __init__(self, out_dir: str | Path, shard_size: int = 4096, dtype: str = "float32") -> None:
        super().__init__(write_interval="batch")
        self.out_dir = Path(out_dir)
        self.shard_size = shard_size
        self.dtype = np.dtype(dtype)
        self._ids: list[str] = []
        self._emb: list[np.ndarray] = []
        self._buffered = 0
        self.written = 0  # embeddings saved by this writer (this rank, this run)
        self.shards = 0  # shards saved by this writer
        self.truncated = 0  # items of the batches seen that the encoder cut at max_seq_length

    def _next_seq(self, rank: int) -> int:
        done = [int(p.stem.split("-")[2]) for p in finished_shards(self.out_dir) if p.name.startswith(f"shard-r{rank}-")]
        return max(done, default=-1) + 1

    def _flush(self, rank: int) -> None:
        if not self._buffered:
            return
        emb = np.concatenate(self._emb).astype(self.dtype)
        stem = self.out_dir / f"shard-r{rank}-{self._next_seq(rank):06d}"
        Path(f"{stem}.ids.json").write_text(json.dumps(self._ids))
        # .npy is written last and renamed into place: its presence marks the shard finished.
        tmp = Path(f"{stem}.tmp.npy")
        np.save(tmp, emb)
        os.replace(tmp, f"{stem}.npy")
        self.written += len(emb)
        self.shards += 1
        self._ids, self._emb, self._buffered = [], [], 0

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0):
        self._ids += prediction["ids"]
        self._emb.append(prediction["emb"])
        self.truncated += prediction.get("truncated", 0)
        self._buffered += len(prediction["ids"])
        if self._buffered >= self.shard_size:
            self._flush(trainer.global_rank)
        # Lightning's own SIGTERM handler only sets this flag (its predict loop keeps going): stop here,
        # after saving what is buffered, so nothing encoded so far is lost
        if trainer.received_sigterm:
            self._flush(trainer.global_rank)
            raise _StopAfterShard

    def on_predict_epoch_end(self, trainer, pl_module) -> None:
        self._flush(trainer.global_rank)


class _ItemProgress(Callback):
    """A tqdm bar in items (not batches) on stderr: done / total, rate and ETA (rank 0 only).

    Lightning's own bar counts batches and writes to stdout, which a CLI may use for its results.
    """

    def __init__(self, total: int, done: int) -> None:
        self.total, self.done, self.bar = total, done, None

    def on_predict_start(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, initial=self.done, unit="item", desc="encode corpus",
                            file=sys.stderr, mininterval=1.0, dynamic_ncols=True)  # fmt: skip

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self.bar is not None:
            self.bar.update(len(batch[0]) * trainer.world_size)

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_predict_end(self, trainer, pl_module) -> None:
        self._close()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._close()


def finished_shards(out_dir: str | Path) -> list[Path]:
    return embedding_shards(out_dir)


def done_ids(out_dir: str | Path) -> set[str]:
    """Ids held by the finished shards of ``out_dir``."""
    out: set[str] = set()
    for p in finished_shards(out_dir):
        out.update(json.loads(shard_ids_path(p).read_text()))
    return out


def done_rows(out_dir: str | Path, corpus: CorpusStore) -> np.ndarray:
    """(N,) bool: which corpus rows the finished shards of ``out_dir`` hold (1 B per item, not a set of ids)."""
    done = np.zeros(len(corpus), dtype=bool)
    for p in finished_shards(out_dir):
        rows = corpus.rows(json.loads(shard_ids_path(p).read_text()))
        done[rows[rows >= 0]] = True
    return done


def load_shards(out_dir: str | Path, order: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """All finished shards joined: ids and (N, D) float32 vectors, deduplicated (DDP pads with repeats).

    With ``order``, rows follow it and every id of ``order`` must be present. Holds every vector in memory
    (several copies while joining): the index is built from the shards directly
    (``FaissIndex.build_from_shards``); this is for small corpora and checks.
    """
    ids: list[str] = []
    vecs: list[np.ndarray] = []
    for p in finished_shards(out_dir):
        ids += json.loads(p.with_suffix("").with_suffix(".ids.json").read_text())
        vecs.append(np.load(p).astype(np.float32))
    mat = np.concatenate(vecs) if vecs else np.zeros((0, 0), np.float32)
    first = {i: r for r, i in reversed(list(enumerate(ids)))}
    keep = order if order is not None else list(dict.fromkeys(ids))
    missing = [i for i in keep if i not in first]
    if missing:
        raise KeyError(f"{out_dir}: {len(missing)} ids have no embedding, e.g. {missing[:3]}")
    return list(keep), mat[[first[i] for i in keep]] if keep else mat


@dataclass
class EncodeReport:
    """What one ``encode_corpus`` call did: items encoded now, items found in finished shards, seconds."""

    encoded: int  # items encoded in this call
    skipped: int  # items already in finished shards
    seconds: float
    truncated: int = 0  # items of this call longer than the encoder reads (cut at max_seq_length)


def count_truncated(encoder: Any, inputs: Sequence[NodeInput | str], chunk: int = 4096) -> int:
    """Inputs the encoder cuts (``NodeEncoder.truncated``), tokenised ``chunk`` at a time to bound memory."""
    truncated = getattr(encoder, "truncated", None)
    if truncated is None:
        return 0
    return sum(sum(truncated(inputs[i : i + chunk])) for i in range(0, len(inputs), chunk))


def encode_corpus(
    corpus: CorpusStore,
    encoder: Any,
    out_dir: str | Path,
    role: str = "f0",
    batch_size: int = 64,
    shard_size: int = 4096,
    hierarchy: Hierarchy | None = None,
    dtype: str = "float32",
    num_workers: int = 0,
    trainer_kwargs: dict[str, Any] | None = None,
    callbacks: Sequence[Any] = (),
    progress: bool = True,
    chunk_size: int = 8192,
) -> EncodeReport:
    """Encode every item of ``corpus`` not already in a finished shard of ``out_dir``.

    Args:
        corpus: the items to embed (rendered by ``render_item``).
        encoder: a ``NodeEncoder``.
        out_dir: shard folder; its ``meta.json`` pins encoder fingerprint, role, corpus digest and renderer
            (``Hierarchy.fingerprint``), and a mismatch raises instead of mixing embeddings of two setups.
        role: ``"f0"`` (retrieval) or ``"ftheta"``.
        batch_size: items per forward pass / per saved shard.
        shard_size: see ``batch_size``.
        trainer_kwargs: extra ``lightning.Trainer`` arguments (e.g. ``devices=8, strategy="ddp"``; the CLI's
            ``--accelerator/--devices/--strategy/--num-nodes``).
        callbacks: extra Lightning callbacks.
        progress: show a progress bar (items done / total, rate, ETA) on stderr.
        chunk_size: items read and rendered at a time (per rank); sorted longest first within a chunk.

    Returns:
        ``EncodeReport`` for this call (this rank); items cut at the encoder's ``max_seq_length`` are
        counted there and logged as one warning once encoding ends.

    Raises:
        EncodeInterrupted: on SIGTERM, after the embeddings encoded so far are saved (exit status 143).
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fp = f0_fingerprint(encoder) if role == "f0" else str(encoder.fingerprint)
    h = hierarchy or Hierarchy()
    meta = {"fingerprint": fp, "role": role, "corpus": corpus.digest(), "dim": int(encoder.dim), "dtype": dtype,
            "render": h.fingerprint}  # fmt: skip
    meta_path = out / META
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if old != meta:
            differ = "; ".join(f"{k}: {old.get(k, '(not recorded)')!r} there, {meta.get(k, '(none)')!r} now"
                               for k in sorted(set(old) | set(meta)) if old.get(k) != meta.get(k))  # fmt: skip
            raise ValueError(f"{meta_path}: the embeddings there come from another setup ({differ}); "
                             "encode into a fresh folder")  # fmt: skip
    else:
        meta_path.write_text(json.dumps(meta, indent=1))
    todo = np.flatnonzero(~done_rows(out, corpus))  # pending rows, in corpus order
    skipped = len(corpus) - len(todo)
    log.info("encoding %d of %d corpus items into %s (%d already in finished shards; batch %d, shard %d)",
             len(todo), len(corpus), out, skipped, batch_size, shard_size)  # fmt: skip
    if not len(todo):
        return EncodeReport(0, skipped, time.perf_counter() - t0)
    writer = EmbeddingShardWriter(out, shard_size=shard_size, dtype=dtype)
    kw: dict[str, Any] = {
        "accelerator": "auto",
        "devices": "auto",
        "logger": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "enable_progress_bar": False,  # ours counts items, on stderr
    }
    kw.update(trainer_kwargs or {})
    bar = [_ItemProgress(len(corpus), skipped)] if progress else []
    # Lightning announces devices and tips at INFO on every Trainer; an encode is a library call.
    chatty = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = chatty.level
    chatty.setLevel(logging.WARNING)
    try:
        trainer = Trainer(callbacks=[writer, *bar, *callbacks], **kw)
        # one item = one batch, rendered when asked (see _LazyBatches); the world size places each rank's run
        # (nodes x devices: known before DDP launches its processes, unlike trainer.world_size)
        world = trainer.num_nodes * trainer.num_devices
        data = _LazyBatches(corpus, todo, encoder, h, batch_size, chunk_size, world)
        loader = DataLoader(data, batch_size=1, shuffle=False, collate_fn=_one_batch, num_workers=num_workers)
        trainer.predict(CorpusEncoderModule(encoder, role), dataloaders=loader, return_predictions=False)
        # DDP: every rank's last shard is on disk before any rank goes on to read the shards
        trainer.strategy.barrier("encode_corpus")
    except _StopAfterShard:
        done = skipped + writer.written
        msg = (f"encoding interrupted by SIGTERM: {writer.written} new embeddings saved in {writer.shards} shard(s) "
               f"under {out} ({done} of {len(corpus)} items done); run the same command again to resume")  # fmt: skip
        print(msg, file=sys.stderr)
        raise EncodeInterrupted(msg) from None
    finally:
        chatty.setLevel(level)
    cut = writer.truncated
    if cut:
        log.warning("%d of the %d items to encode are longer than the encoder reads (max_seq_length=%s tokens): "
                    "their embeddings see only the first tokens", cut, len(todo),
                    getattr(encoder, "max_seq_length", "?"))  # fmt: skip
    log.info("encoded %d items in %.1f s", writer.written, time.perf_counter() - t0)
    return EncodeReport(writer.written, skipped, time.perf_counter() - t0, truncated=cut)
