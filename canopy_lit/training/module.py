"""NodeEncoderModule: trains one shared LoRA on the node encoder fθ against the frozen query encoder f0."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any

import lightning as L
import torch
from annotated_types import Ge, Gt, Interval
from torch import nn

from canopy_lit.data.batch import PreferenceBatch
from canopy_lit.encoders.base import NodeEncoder
from canopy_lit.encoders.late import LATE_POOLINGS
from canopy_lit.supervision import PairKind
from canopy_lit.training.losses import pair_costs, pairwise_ranking_loss
from canopy_lit.training.metrics import DecisionAccuracy

TEST_SCORERS = ("ftheta", "f0")
# model.optimizer / model.scheduler when none is given: the paper's AdamW at 5e-5, no decay, a constant rate.
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
SchedulerFactory = Callable[..., torch.optim.lr_scheduler.LRScheduler]
PAPER_OPTIMIZER: OptimizerFactory = functools.partial(torch.optim.AdamW, lr=5e-5, weight_decay=0.0)


class NodeEncoderModule(L.LightningModule):
    """Pairwise-ranking training of fθ = backbone + LoRA; f0 = the same backbone, adapter off.

    Args:
        encoder: a :class:`NodeEncoder` (a fresh adapter is added unless it already has one).
        optimizer: ``params -> Optimizer`` for the LoRA parameters (``model.optimizer``, a ``_partial_`` block:
            ``torch.optim.AdamW`` with ``lr`` and ``weight_decay``). None: AdamW at lr 5e-5 (the paper's).
        scheduler: ``(optimizer, total_steps=N) -> LRScheduler``, stepped every optimizer step (``model.scheduler``,
            a ``_partial_`` block: :func:`~canopy_lit.training.schedules.warmup_schedule`). None: a constant rate.
        lora_r: adapter rank (paper: 8).
        lora_alpha: adapter alpha (paper: 16).
        lora_dropout: adapter dropout (paper: 0.05).
        lora_target_modules: modules that get LoRA (None = the backbone's default).
        lora_layers: transformer layers that get LoRA (None = all; top layers only = shorter backprop).
        scale: λ of the pairwise loss (paper: 20).
        margin: m of the pairwise loss, the lead each winner must keep (paper: 0).
        stop_weight: loss weight of "stop" instances (v fully gold) relative to "descend" ones (paper: 1).
            Stops are 1-2% of the bundled instances, so the loss mostly teaches "descend" (issue: gold
            recall); > 1 re-weights them.
        gold_child_weight: cost c of each g ≻ v pair (a gold child over its partly gold parent) inside the
            instance's loss, ℓ = log(1 + c Σ exp(x_gv) + Σ exp(x_other)) (paper: 1). Refinement drops a gold
            child exactly when it scores below its parent while a sibling does not, so these are the pairs
            whose violation loses gold; the v ≻ n pairs only cost tokens. > 1 trades compression for recall.
        gold_sibling_weight: cost c of each g ≻ n pair (a gold child over a gold-free sibling) (paper: 1).
            If every gold child beats its gold-free siblings, a sibling clearing the parent's bar lifts the
            gold over it too, so these pairs also guard recall, without asking children to beat parents.
        backbone_dropout: keep the backbone's own dropout active while training (False = only LoRA dropout).
        chunk_size: node texts per length-sorted forward chunk (less padding, same result).
        activation_checkpointing: recompute each backbone layer's activations in the backward pass instead
            of keeping them (:func:`enable_activation_checkpointing`): the same losses and gradients, bit for
            bit, for one more forward per step. A training step otherwise holds every layer's attention maps
            of all its nodes at once (B x heads x L x L floats per chunk: ~2.7 GB for 16 MiniLM nodes of 512
            tokens), the peak of a CPU run.
        benchmarks: names for per-benchmark metrics (default: taken from the datamodule).
        test_scorers: what the test pass scores, a subset of ``ftheta`` (keys ``test/<metric>``) and ``f0``
            (``test/<metric>_f0``). Each is one forward over every test node: a script that measures f0
            elsewhere (``train.py train=false model.test_scorers=[f0]``, as scripts/quickstart.sh does beside
            training) tests ``[ftheta]`` only and halves the pass.
    """

    def __init__(
        self,
        encoder: NodeEncoder,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
        lora_r: Annotated[int, Ge(1)] = 8,
        lora_alpha: Annotated[float, Gt(0)] = 16,
        lora_dropout: Annotated[float, Interval(ge=0, lt=1)] = 0.05,
        lora_target_modules: Sequence[str] | None = None,
        lora_layers: Sequence[int] | None = None,
        scale: Annotated[float, Gt(0)] = 20.0,
        margin: Annotated[float, Ge(0)] = 0.0,
        stop_weight: Annotated[float, Gt(0)] = 1.0,
        gold_child_weight: Annotated[float, Gt(0)] = 1.0,
        gold_sibling_weight: Annotated[float, Gt(0)] = 1.0,
        backbone_dropout: bool = True,
        chunk_size: Annotated[int, Ge(1)] = 16,
        activation_checkpointing: bool = False,
        benchmarks: Sequence[str] | None = None,
        test_scorers: Sequence[str] = ("ftheta", "f0"),
    ) -> None:
        super().__init__()
        # Plain lists (not OmegaConf ListConfig) so checkpoints load with torch.load(weights_only=True).
        lora_target_modules = [str(m) for m in lora_target_modules] if lora_target_modules is not None else None
        lora_layers = [int(i) for i in lora_layers] if lora_layers is not None else None
        benchmarks = [str(b) for b in benchmarks] if benchmarks else None
        test_scorers = [str(t) for t in test_scorers]
        if not test_scorers or set(test_scorers) - set(TEST_SCORERS):
            raise ValueError(f"model.test_scorers must be a non-empty subset of {list(TEST_SCORERS)}, got {test_scorers}")
        # the factories are config blocks (the run's config records them), not plain values a checkpoint can hold
        self.save_hyperparameters(ignore=["encoder", "optimizer", "scheduler"])
        self.optimizer_factory = optimizer or PAPER_OPTIMIZER
        self.scheduler_factory = scheduler
        self.hparams["encoder_name"] = encoder.name
        if stop_weight <= 0 or margin < 0:
            raise ValueError(f"model.stop_weight must be > 0 and model.margin >= 0, got {stop_weight} and {margin}")
        if gold_child_weight <= 0 or gold_sibling_weight <= 0:
            raise ValueError(
                f"model.gold_child_weight and model.gold_sibling_weight must be > 0, got {gold_child_weight} and {gold_sibling_weight}"
            )
        self.encoder = encoder
        if not encoder.has_adapter:
            encoder.add_adapter(lora_r, lora_alpha, lora_dropout, lora_target_modules, lora_layers)
        self.assert_only_lora_trainable()
        if activation_checkpointing:
            enable_activation_checkpointing(encoder.model)
        # Only adapter weights go into checkpoints, so loading must tolerate the missing backbone keys.
        self.strict_loading = False
        self._query_cache: dict[str, torch.Tensor] = {}  # f0 never changes: encode each question once
        self.f0_results: dict[str, float] = {}
        self.test_results: dict[str, float] = {}
        self._benchmarks = list(benchmarks) if benchmarks else None
        self._eval_cache: dict[str, dict[Any, torch.Tensor]] = {}

    # ----------------------------------------------------------------- setup
    def assert_only_lora_trainable(self) -> None:
        bad = [n for n, p in self.named_parameters() if p.requires_grad and "lora_" not in n]
        if bad:
            raise AssertionError(f"only LoRA parameters may train, but these require grad: {bad[:5]}")

    def setup(self, stage: str) -> None:
        # a frozen adapter loaded through encoder.adapter can be tested (train=false), not fitted
        if stage == "fit" and not any(p.requires_grad for p in self.parameters()):
            raise AssertionError("no trainable LoRA parameters (an encoder.adapter loads frozen: test it with train=false)")
        if self._benchmarks is None:
            dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
            self._benchmarks = list(getattr(dm, "benchmark_names", []) or [])
        if not hasattr(self, "val_acc"):
            self.val_acc = DecisionAccuracy(self._benchmarks)
            self.val_acc_f0 = DecisionAccuracy(self._benchmarks)
            # Test pools in-domain and zero-shot benchmarks apart (the paper's protocol reports both).
            groups = self._test_groups()
            self.test_acc = DecisionAccuracy(self._benchmarks, groups=groups)
            self.test_acc_f0 = DecisionAccuracy(self._benchmarks, groups=groups)

    def _test_groups(self) -> dict[str, list[str]]:
        """{"in_domain": trained-on benchmarks, "zero_shot": test-only ones} from the datamodule, if it says."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        zero = [b for b in getattr(dm, "zero_shot_names", []) or [] if b in self._benchmarks]
        if not zero:
            return {}
        return {"in_domain": [b for b in self._benchmarks if b not in zero], "zero_shot": zero}

    def configure_optimizers(self) -> Any:
        opt = self.optimizer_factory([p for p in self.parameters() if p.requires_grad])
        if self.scheduler_factory is None:
            return opt
        sched = self.scheduler_factory(opt, total_steps=max(int(self.trainer.estimated_stepping_batches), 1))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ----------------------------------------------------------------- scoring
    def query_embeddings(self, batch: PreferenceBatch) -> torch.Tensor:
        """(Q, D) f0 embeddings of the batch's questions (eval mode, no grad, cached by text)."""
        texts = batch.query_texts
        missing = [i for i, t in enumerate(texts) if t not in self._query_cache]
        if missing:
            tokens = {k: v[missing] for k, v in _tokens(batch.query_tokens, "query_tokens").items()}
            # Restore each submodule's own mode: model.train(True) would re-enable the backbone dropout
            # that on_train_batch_start turned off (backbone_dropout=false) on every cache-miss step.
            modes = [(m, m.training) for m in self.encoder.model.modules()]
            self.encoder.model.eval()
            try:
                with torch.no_grad(), self.encoder.adapter_disabled():
                    emb = self.encoder.embed(tokens).float()
            finally:
                for m, mode in modes:
                    m.training = mode
            for i, e in zip(missing, emb, strict=True):
                self._query_cache[texts[i]] = e.detach()
        return torch.stack([self._query_cache[t] for t in texts]).to(self.device)

    def node_embeddings(
        self, batch: PreferenceBatch, f0: bool = False, cache: dict[Any, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """(U, D) embeddings of the batch's distinct node inputs (fθ, or f0 when ``f0``).

        ``cache`` (eval only: weights are fixed within an eval epoch) maps a node's key -> embedding,
        so a node that is v in one instance and a child in another is encoded once per epoch. Keys are
        the batch's ``cache_keys`` (text and frames) when a node has frames, since visual nodes may
        share a text (untitled video clips all render as ``[00:00-00:30]`` ...), else the texts.

        With late pooling (``encoder.node_pooling=late|late_region``; the batch carries ``late``) each node is
        pooled from one forward over its whole item (``NodeEncoder.late_embed``, the inference path's), with
        gradients through the adapter; keys are then (item key, node id).
        """
        pooling = getattr(self.encoder, "node_pooling", "node")
        if (batch.late is not None) != (pooling in LATE_POOLINGS):
            raise ValueError(
                f"encoder.node_pooling={pooling} but the batch {'carries' if batch.late is not None else 'does not carry'} "
                "items and node spans: the datamodule's node_pooling must be the encoder's"
            )
        if batch.late is not None:
            return self._late_node_embeddings(batch, f0, cache)
        keys = batch.cache_keys
        node_tokens = _tokens(batch.node_tokens, "node_tokens")
        chunk = self.hparams.chunk_size
        ctx = self.encoder.adapter_disabled() if f0 else contextlib.nullcontext()
        if cache is None:
            with ctx:
                return self.encoder.embed_sorted(node_tokens, chunk).float()
        missing = [i for i, k in enumerate(keys) if k not in cache]
        if missing:
            tokens = node_tokens
            if len(missing) < len(keys):
                tokens = self.encoder.select_inputs(tokens, missing)
            with ctx:
                emb = self.encoder.embed_sorted(tokens, chunk).float()
            for i, e in zip(missing, emb, strict=True):
                cache[keys[i]] = e
        return torch.stack([cache[k] for k in keys])

    def _late_node_embeddings(
        self, batch: PreferenceBatch, f0: bool, cache: dict[Any, torch.Tensor] | None
    ) -> torch.Tensor:
        """(U, D) node embeddings pooled from whole-item forwards (``node_embeddings`` with late pooling)."""
        late = batch.late
        assert late is not None
        keys = batch.cache_keys
        owner = late.node_item.tolist()
        todo = range(len(keys)) if cache is None else [i for i, k in enumerate(keys) if k not in cache]
        by_item: dict[int, list[int]] = {}
        for u in todo:
            by_item.setdefault(owner[u], []).append(u)
        emb = None
        if by_item:
            rows = list(by_item)
            ctx = self.encoder.adapter_disabled() if f0 else contextlib.nullcontext()
            with ctx:  # grad=True: the module's train / eval mode and grad state, as Lightning set them
                parts = self.encoder.late_embed(
                    [late.items[r] for r in rows], [[late.node_spans[u] for u in by_item[r]] for r in rows], grad=True
                )
            emb = torch.cat(parts).float()
            order = [u for r in rows for u in by_item[r]]
        if cache is None:
            assert emb is not None
            inverse = torch.empty(len(order), dtype=torch.long, device=emb.device)
            inverse[torch.tensor(order, dtype=torch.long, device=emb.device)] = torch.arange(len(order), device=emb.device)
            return emb[inverse]
        if emb is not None:
            for u, e in zip(order, emb, strict=True):
                cache[keys[u]] = e
        return torch.stack([cache[k] for k in keys])

    def pair_scores(
        self, batch: PreferenceBatch, f0: bool = False, cache: dict[Any, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, P) winner and loser scores s(q, v) = cos(f0(q), fθ(v)) (f0 for nodes too when ``f0``);
        with ``node_pooling=cross``, s(q, v) = cos(f0(q), fθ(q ⊕ v)) (``cross_pair_scores``)."""
        if getattr(self.encoder, "node_pooling", "node") == "cross":
            return self.cross_pair_scores(batch, f0, cache)
        q = self.query_embeddings(batch)[batch.query_index]  # (N, D)
        nodes = self.node_embeddings(batch, f0, cache)  # (U, D)
        s = nodes @ q.T  # (U, N): each distinct node scored against every instance's question
        cols = torch.arange(q.shape[0], device=s.device).unsqueeze(1)
        return s[batch.winner, cols], s[batch.loser, cols]

    def cross_pair_scores(
        self, batch: PreferenceBatch, f0: bool = False, cache: dict[Any, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, P) winner and loser scores cos(f0(q), fθ(q ⊕ v)): each distinct (question, node) pair of the
        batch read in one forward (``TextEncoder.tokenize_pairs``), the node's tokens pooled, with gradients
        through the adapter. ``cache`` (eval) keys on (question, node key)."""
        q = self.query_embeddings(batch)  # (Q, D)
        keys = batch.cache_keys
        qi = batch.query_index.tolist()
        real = batch.mask.tolist()
        pairs: dict[tuple[int, int], int] = {}

        def rows(side: torch.Tensor) -> list[list[int]]:  # padding slots point at pair 0: masked in the loss
            return [[pairs.setdefault((qi[n], u), len(pairs)) if ok else 0 for u, ok in zip(row, real[n], strict=True)]
                    for n, row in enumerate(side.tolist())]  # fmt: skip

        pair_of = torch.tensor([rows(batch.winner), rows(batch.loser)], dtype=torch.long, device=q.device)  # (2, N, P)
        distinct = list(pairs)
        ctx = self.encoder.adapter_disabled() if f0 else contextlib.nullcontext()
        missing = [j for j, (a, u) in enumerate(distinct) if cache is None or (batch.query_texts[a], keys[u]) not in cache]
        emb: dict[int, torch.Tensor] = {}
        if missing:
            tokens = self.encoder.tokenize_pairs(
                [batch.query_texts[distinct[j][0]] for j in missing], [batch.node_texts[distinct[j][1]] for j in missing]
            )
            with ctx:
                out = self.encoder.embed_sorted(tokens, self.hparams.chunk_size).float()
            for j, e in zip(missing, out, strict=True):
                emb[j] = e
                if cache is not None:
                    cache[(batch.query_texts[distinct[j][0]], keys[distinct[j][1]])] = e
        nodes = torch.stack([emb[j] if j in emb else cache[(batch.query_texts[a], keys[u])]  # type: ignore[index]
                             for j, (a, u) in enumerate(distinct)])  # fmt: skip
        s = (nodes * q[torch.tensor([a for a, _ in distinct], device=q.device)]).sum(-1)  # (pairs,)
        s = s[pair_of]
        return s[0], s[1]

    # ----------------------------------------------------------------- steps
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # from_pretrained leaves the backbone in eval mode and Lightning keeps submodule modes, so set
        # them explicitly: LoRA dropout always on, the backbone's own dropout only if asked for.
        self.encoder.model.train()
        if not self.hparams.backbone_dropout:
            for name, m in self.encoder.model.named_modules():
                if isinstance(m, nn.Dropout) and "lora_dropout" not in name:
                    m.eval()

    def training_step(self, batch: PreferenceBatch, batch_idx: int) -> torch.Tensor:
        win, lose = self.pair_scores(batch)
        weight = None
        if self.hparams.stop_weight != 1.0:
            weight = 1.0 + (self.hparams.stop_weight - 1.0) * batch.stop.to(win.dtype)
        pair_weight = None
        child, sib = self.hparams.gold_child_weight, self.hparams.gold_sibling_weight
        if child != 1.0 or sib != 1.0:
            costs = {PairKind.CHILD_OVER_PARENT: child, PairKind.GOLD_OVER_SIBLING: sib}
            pair_weight = pair_costs(batch.pair_kind, costs, win.dtype)
        # mask: P(v)'s pairs and any hard-negative pairs alike, one ranking loss per instance.
        loss = pairwise_ranking_loss(
            win, lose, batch.mask, self.hparams.scale, margin=self.hparams.margin, weight=weight,
            pair_weight=pair_weight,
        )
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def _update(self, metric: DecisionAccuracy, batch: PreferenceBatch, f0: bool) -> None:
        win, lose = self.pair_scores(batch, f0=f0, cache=self._eval_cache.setdefault("f0" if f0 else "ft", {}))
        # in_tree: hard-negative pairs train the encoder but are no refinement decision.
        metric.update(
            win, lose, batch.mask, batch.tie_ok, batch.benchmark, batch.depth, batch.stop, batch.in_tree
        )

    def on_validation_epoch_start(self) -> None:
        self._eval_cache = {}

    def on_test_epoch_start(self) -> None:
        self._eval_cache = {}

    def validation_step(self, batch: PreferenceBatch, batch_idx: int) -> None:
        self._update(self.val_acc, batch, f0=False)
        if not self.f0_results and not self.trainer.sanity_checking:
            self._update(self.val_acc_f0, batch, f0=True)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            self.val_acc.reset()
            self.val_acc_f0.reset()
            return
        res = {f"val/{k}": float(v) for k, v in self.val_acc.compute().items()}
        self.val_acc.reset()
        self._eval_cache = {}
        if not self.f0_results and self.val_acc_f0.update_count > 0:
            self.f0_results = {f"val/{k}_f0": float(v) for k, v in self.val_acc_f0.compute().items()}
            self.val_acc_f0.reset()
        # f0 is logged every epoch (constant) so the csv/W&B curves carry the baseline line.
        # sync_dist: the metrics' compute() already reduced over ranks, so the mean over equal values is a
        # no-op; without it Lightning warns once per key under DDP.
        main = res.pop("val/decision_accuracy")
        self.log("val/decision_accuracy", main, prog_bar=True, sync_dist=True)
        self.log_dict({**res, **self.f0_results}, sync_dist=True)

    def test_step(self, batch: PreferenceBatch, batch_idx: int) -> None:
        if "ftheta" in self.hparams.test_scorers:
            self._update(self.test_acc, batch, f0=False)
        if "f0" in self.hparams.test_scorers:
            self._update(self.test_acc_f0, batch, f0=True)

    def on_test_epoch_end(self) -> None:
        res: dict[str, float] = {}
        if "ftheta" in self.hparams.test_scorers:
            res |= {f"test/{k}": float(v) for k, v in self.test_acc.compute().items()}
        if "f0" in self.hparams.test_scorers:
            res |= {f"test/{k}_f0": float(v) for k, v in self.test_acc_f0.compute().items()}
        # counts() syncs like compute(): every rank calls it and gets the totals over all ranks.
        counted = self.test_acc if "ftheta" in self.hparams.test_scorers else self.test_acc_f0
        res |= {f"test/{k}": float(v) for k, v in counted.counts().items()}
        self.test_acc.reset()
        self.test_acc_f0.reset()
        self._eval_cache = {}
        self.test_results = res
        self.log_dict(res, sync_dist=True)  # already reduced over ranks (above): sync_dist only averages equals

    # ----------------------------------------------------------------- checkpoints: adapter only
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}
        checkpoint["f0_results"] = self.f0_results
        checkpoint["encoder_fingerprint"] = self.encoder.fingerprint
        # A question's f0 embedding depends (in the last bits) on the batch it was first encoded in: a resume
        # reuses these rather than re-encoding them in other batches, so it continues bit for bit.
        texts = list(self._query_cache)
        checkpoint["query_cache"] = {
            "texts": texts,
            "embeddings": torch.stack([self._query_cache[t] for t in texts]).cpu() if texts else torch.empty(0, device="cpu"),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.f0_results = dict(checkpoint.get("f0_results") or {})
        cache = checkpoint.get("query_cache") or {}
        for text, emb in zip(cache.get("texts", []), cache.get("embeddings", []), strict=True):
            self._query_cache.setdefault(text, emb.to(self.device))  # a cached value never changes


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Per-layer activation checkpointing of a (peft-wrapped) transformers backbone, non-reentrant.

    Only a layer's input is kept in the forward; its activations are recomputed when the backward reaches
    it, with the forward's RNG state (``torch.utils.checkpoint``), so dropout masks and every number stay
    those of a plain step. Applies in training mode with gradients on only: f0 queries and evaluation
    (``no_grad``) run as before.

    Raises:
        ValueError: the backbone has no transformers activation checkpointing.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ValueError(f"model.activation_checkpointing: {type(base).__name__} does not support it; set it to false")
    enable = getattr(base, "activation_checkpointing_enable", None)  # transformers >= 5.25
    if enable is not None:
        enable({"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # transformers also makes the embedding output require grad, which only reentrant checkpoints need:
    # without it the backward stops at the first layer, as in a plain step.
    if hasattr(base, "disable_input_require_grads") and hasattr(base, "_require_grads_hook"):
        base.disable_input_require_grads()


def _tokens(tokens: dict[str, torch.Tensor] | None, name: str) -> dict[str, torch.Tensor]:
    if tokens is None:
        raise ValueError(f"the batch has no {name}: call datamodule.set_tokenizer(encoder.tokenize)")
    return tokens
