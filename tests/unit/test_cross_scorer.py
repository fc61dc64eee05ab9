"""The query-aware node scorer (``encoder.node_pooling=cross``): each node read after the question in one
forward, its own tokens pooled, scored by cosine with f0(q); the training path computes the same numbers with
gradients through LoRA. Real bundled HotpotQA, real MiniLM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.encoders.text import TextEncoder
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.scoring.scorers import CrossNodeScorer, NodeScorer, node_scorer
from canopy_lit.supervision import add_hard_negatives, training_instances
from canopy_lit.training import NodeEncoderModule
from canopy_lit.types import NodeInput


@pytest.fixture(scope="module")
def hotpot():
    bench = load_benchmark("hotpotqa")
    questions = split_questions(bench, "train")[:2]
    hier = Hierarchy(2)
    return bench, questions, hier


def _encoder(trained: bool = True) -> TextEncoder:
    torch.manual_seed(0)
    enc = TextEncoder("minilm", node_pooling="cross")
    if trained:  # a trained-looking adapter: fθ differs from f0
        enc.add_adapter(8, 16, 0.0, ["query", "value"])
        with torch.no_grad():
            for name, p in enc.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02)
    return enc


def test_the_pool_mask_holds_the_node_tokens_and_its_closing_separator_only() -> None:
    enc = _encoder(trained=False)
    question, node = "Where does the river flow?", "It lies on the Seine."
    tokens = enc.tokenize_pairs([question, "Who?"], [node, node])
    ids, mask, pool = tokens["input_ids"], tokens["attention_mask"], tokens["pool_mask"]
    node_ids = enc.tokenizer(node, add_special_tokens=False)["input_ids"]
    for row in range(2):
        pooled = ids[row][pool[row].bool()].tolist()
        assert pooled == [*node_ids, enc.tokenizer.sep_token_id]
        assert bool((pool[row] <= mask[row]).all())  # never a padding token
    assert int(pool[0].sum()) == int(pool[1].sum())  # the question's length does not change what is pooled


def test_a_cross_embedding_is_the_mean_of_the_node_tokens_states_read_after_the_question() -> None:
    enc = _encoder()
    question, node = "Which river runs through Paris?", "Paris. It lies on the Seine."
    got = enc.encode_pairs([question], [node])[0]
    tokens = enc.tokenize_pairs([question], [node])
    pool = tokens.pop("pool_mask")[0].bool()
    enc.model.eval()
    with torch.no_grad():
        hidden = enc.model(**tokens).last_hidden_state[0]
    want = torch.nn.functional.normalize(hidden[pool].mean(0), dim=-1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # read after another question the same node has another vector (a per-node embedding would not)
    other = enc.encode_pairs(["Who wrote Hamlet?"], [node])[0]
    assert float(got @ other) < 0.999


def test_the_scorer_scores_requested_nodes_once_per_question_and_matches_encode_pairs(hotpot) -> None:
    bench, questions, hier = hotpot
    enc = _encoder()
    scorer = node_scorer(enc, hier)
    assert isinstance(scorer, CrossNodeScorer)
    q = questions[0]
    trees = [hier.build(bench.items[i]) for i in q.gold]
    query = scorer.embed_query(q.text)
    want_ids = [[0, *trees[0].children[0]], [0]]
    got = scorer.score(query, trees, want_ids)
    inputs = [hier.node_input(t, i) for t, ii in zip(trees, want_ids, strict=True) for i in ii]
    ref = enc.encode_pairs([q.text] * len(inputs), inputs).numpy() @ enc.encode_queries([q.text]).numpy()[0]
    np.testing.assert_allclose(np.concatenate(got), ref, atol=1e-5)
    misses = scorer.cache.stats()["misses"]
    assert misses == len({hier.node_input(t, i).text for t, ii in zip(trees, want_ids, strict=True) for i in ii})
    again = scorer.score(q.text, trees, want_ids)  # a text query works too; nothing is encoded again
    assert scorer.cache.stats()["misses"] == misses
    np.testing.assert_allclose(np.concatenate(again), np.concatenate(got), atol=1e-6)
    with pytest.raises(ValueError, match="not a vector"):
        scorer.score(query.vector, trees)


def test_f0_and_per_node_pooling_keep_their_scorers(hotpot) -> None:
    bench, questions, hier = hotpot
    enc = _encoder()
    frozen = node_scorer(enc, hier, frozen=True)  # scorer=f0: the adapter off on both sides
    assert isinstance(frozen, CrossNodeScorer)
    tree = hier.build(bench.items[next(iter(questions[0].gold))])
    bare = CrossNodeScorer(_encoder(trained=False), hier)
    np.testing.assert_allclose(frozen.score(questions[0].text, [tree])[0], bare.score(questions[0].text, [tree])[0], atol=1e-5)
    assert isinstance(node_scorer(TextEncoder("minilm"), hier), NodeScorer)


def test_a_node_with_frames_is_refused_by_name(hotpot) -> None:
    bench, questions, hier = hotpot
    tree = hier.build(bench.items[next(iter(questions[0].gold))])

    class FramedHierarchy(Hierarchy):
        def node_input(self, tree, node):  # noqa: ANN001, ANN202
            return NodeInput("a clip", frames=[("f.jpg", 0.0)])

    with pytest.raises(ValueError, match=r"text nodes only; node 0 of item"):
        CrossNodeScorer(_encoder(trained=False), FramedHierarchy(2)).score("q", [tree], [[0]])


def test_training_scores_are_the_inference_scores_with_grad_to_lora(hotpot) -> None:
    bench, questions, hier = hotpot
    insts = training_instances(questions, bench.items, hier)
    add_hard_negatives(insts[:3], questions, bench.candidates, bench.items, hier, 1)
    dm = PreferenceDataModule.from_instances({"train": insts}, ["hotpotqa"])
    torch.manual_seed(0)
    enc = TextEncoder("minilm", node_pooling="cross")
    module = NodeEncoderModule(enc, lora_target_modules=["query", "value"])
    with torch.no_grad():
        for name, p in enc.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    dm.set_tokenizer(enc.tokenize)
    batch = dm.collate(dm.examples["train"])
    module.eval()  # no dropout: the same numbers as inference
    win, lose = module.pair_scores(batch)
    assert win.requires_grad
    mask = batch.mask
    qtext = [batch.query_texts[i] for i in batch.query_index.tolist()]
    for side, got in (("winner", win), ("loser", lose)):
        rows = getattr(batch, side)
        n, p = torch.nonzero(mask, as_tuple=True)
        nodes = [batch.node_texts[int(rows[a, b])] for a, b in zip(n, p, strict=True)]
        queries = [qtext[int(a)] for a in n]
        ref = (enc.encode_pairs(queries, nodes) * enc.encode_queries(queries)).sum(-1)
        torch.testing.assert_close(got[mask].detach(), ref, atol=1e-5, rtol=0)
    (win[mask].sum() - lose[mask].sum()).backward()
    grads = [p.grad for n, p in enc.model.named_parameters() if "lora_" in n]
    assert grads and all(g is not None and bool(g.abs().sum() > 0) for g in grads)
    # eval caching: a second pass with the cache encodes nothing new and gives the same scores
    cache: dict = {}
    with torch.no_grad():
        first = module.pair_scores(batch, cache=cache)
        size = len(cache)
        second = module.pair_scores(batch, cache=cache)
    assert len(cache) == size == len({(qtext[int(a)], batch.node_texts[int(getattr(batch, s)[a, b])])
                                       for s in ("winner", "loser") for a, b in torch.nonzero(mask).tolist()})  # fmt: skip
    torch.testing.assert_close(first[0], second[0])
