"""Parsing of LLM output: JSON extraction, critic fallbacks, yes/no log-probs, answers, labels."""

from __future__ import annotations

import math

import pytest

from canopy_lit.llm import base, prompts, wire
from canopy_lit.llm.parsing import (
    ParseStats,
    extract_json,
    p_yes,
    parse_choice_letter,
    parse_critic,
    parse_followup,
    parse_ircot_step,
    parse_label,
    parse_short_answer,
)

Q = "Which city hosted the 1900 Olympics?"


@pytest.mark.parametrize(
    "text",
    [
        '{"sufficient": false, "missing": ["host city"], "followup_query": "1900 Olympics host"}',
        'Sure! Here is my verdict:\n```json\n{"sufficient": false, "missing": ["host city"], '
        '"followup_query": "1900 Olympics host"}\n```\nHope this helps.',
        "Verdict: {'sufficient': False, 'missing': ['host city'], 'followup_query': '1900 Olympics host',}",
        'I think {"sufficient": "no", "missing": "host city", "followup_query": "1900 Olympics host"} is right',
    ],
)
def test_critic_json_is_found_in_chatty_output(text: str) -> None:
    stats = ParseStats()
    v = parse_critic(text, Q, stats)
    assert (v.sufficient, v.missing, v.followup_query, v.parsed) == (False, ["host city"], "1900 Olympics host", True)
    assert stats.failures["critic"] == 0 and stats.attempts["critic"] == 1


def test_braces_inside_strings_do_not_break_extraction() -> None:
    assert extract_json('x {"a": "curly } brace", "b": {"c": 1}} y') == {"a": "curly } brace", "b": {"c": 1}}
    assert extract_json("no json here") is None
    assert extract_json("[1, 2]") is None  # only objects count


def test_unparseable_critic_is_insufficient_with_the_question() -> None:
    stats = ParseStats()
    v = parse_critic("I cannot decide, sorry.", Q, stats)
    assert not v.sufficient and v.followup_query == Q and not v.parsed
    assert stats.failures["critic"] == 1


def test_truncated_critic_keeps_a_readable_verdict() -> None:
    stats = ParseStats()
    v = parse_critic('{"sufficient": true, "missing": ["the ye', Q, stats)
    assert v.sufficient and v.followup_query == "" and stats.failures["critic"] == 0
    v = parse_critic('{"sufficient": false, "followup_query": "Paris 1900 games", "missing": [', Q, stats)
    assert not v.sufficient and v.followup_query == "Paris 1900 games"


def test_sufficient_verdict_drops_placeholder_followup() -> None:
    v = parse_critic('{"sufficient": true, "missing": ["x"], "followup_query": "<search query>"}', Q)
    assert v.sufficient and v.missing == [] and v.followup_query == ""


def test_insufficient_without_query_falls_back_to_question() -> None:
    v = parse_critic('{"sufficient": false, "missing": [], "followup_query": ""}', Q)
    assert v.followup_query == Q and v.parsed
    missing, follow, ok = parse_followup("garbage", Q, ParseStats())
    assert (missing, follow, ok) == ([], Q, False)


def test_p_yes_normalises_over_yes_and_no_variants() -> None:
    lp = {"Yes": math.log(0.3), " yes": math.log(0.1), "No": math.log(0.2), "Maybe": math.log(0.4)}
    assert p_yes(lp) == pytest.approx(0.4 / 0.6)
    assert p_yes({"The": 0.0}) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Paris", "Paris"), ("Answer: Paris.", "Paris"), ('"Paris"\nBecause ...', "Paris"), ("**Paris**", "Paris"),
     ('{"answer": "Paris"}', "Paris")],
)  # fmt: skip
def test_short_answer(text: str, expected: str) -> None:
    assert parse_short_answer(text, ParseStats()) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("B", "B"), ("(C) red", "C"), ("Answer: A.", "A"), ("The answer is option D", "D"), ("none of them", None),
     ("a man rides a horse", None), ("A man rides a horse.", None), ("(b)", "B"), ("I think it is B.", "B"),
     ("The answer is A man", None), ("Option C: a red car", "C")],
)  # fmt: skip
def test_choice_letter(text: str, expected: str | None) -> None:
    assert parse_choice_letter(text, 4, ParseStats()) == expected


def test_labels_from_json_words_or_default() -> None:
    labels = ("aggregation", "lookup")
    assert parse_label('{"label": "Aggregation"}', labels, "lookup") == ("aggregation", True)
    assert parse_label("I would say lookup.", labels, "aggregation") == ("lookup", True)
    stats = ParseStats()
    assert parse_label("unclear", labels, "lookup", "aggregation", stats) == ("lookup", False)
    assert stats.failures["aggregation"] == 1


def test_ircot_step_sentence_and_answer() -> None:
    s, a = parse_ircot_step("Paris hosted the 1900 Games. Then more text follows.")
    assert s == "Paris hosted the 1900 Games." and a is None
    s, a = parse_ircot_step("The host was Paris. So the answer is: Paris. Extra.")
    assert a == "Paris" and s == "The host was Paris. So the answer is: Paris."


def test_text_only_models_get_image_descriptions() -> None:
    msgs = [base.user("What is shown?", images=[{"url": "/data/cat.png", "description": "a cat on a sofa"}])]
    flat = base.render_text_only(msgs)
    assert flat[0]["content"] == "What is shown?\n[image cat.png: a cat on a sofa]"
    sent = base.strip_extensions(msgs)
    assert sent[0]["content"][1] == {"type": "image_url", "image_url": {"url": "file:///data/cat.png"}}


def test_prompts_keep_the_shared_prefix_first() -> None:
    ev = ["Paris: capital of France.", "Paris hosted the 1900 Summer Olympics."]
    a, b, c = (prompts.critic_yes_no(Q, ev), prompts.critic_json(Q, ev), prompts.reader(Q, ev))
    shared = a[1]["content"].split("Task:")[0]
    assert b[1]["content"].startswith(shared) and c[1]["content"].startswith(shared)
    assert a[0] == b[0] == c[0]
    # evidence added in a later round extends, never rewrites, the earlier prompt
    later = prompts.critic_yes_no(Q, [*ev, "More evidence."])[1]["content"]
    assert later.startswith(shared.rstrip())


def test_call_log_summarises_by_role_and_scope() -> None:
    log = base.CallLog()
    with log.scope("q1"):
        log.add("critic", 100, 1, 0.5)
        log.add("reader", 80, 5, 0.2)
    with log.scope("q2"):
        log.add("critic", 50, 1, 0.1)
    s = log.summary(scope="q1")
    assert s["calls"] == 2 and s["prompt_tokens"] == 180 and s["by_role"]["critic"]["calls"] == 1
    assert log.summary(since=2)["by_role"] == {"critic": {"calls": 1, "prompt_tokens": 50, "cached_tokens": 0,
                                                          "completion_tokens": 1, "seconds": 0.1}}  # fmt: skip


def test_openai_response_parsing() -> None:
    body = {
        "choices": [{"message": {"content": "Yes"}, "finish_reason": "length",
                     "logprobs": {"content": [{"token": "Yes", "logprob": -0.1,
                                               "top_logprobs": [{"token": "Yes", "logprob": -0.1},
                                                                {"token": "No", "logprob": -2.4}]}]}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 8}},
    }  # fmt: skip
    r = wire.parse_openai_response(body, source="t")
    assert r.text == "Yes" and r.prompt_tokens == 12 and r.cached_tokens == 8
    assert r.top_logprobs == [{"Yes": -0.1, "No": -2.4}]
    with pytest.raises(base.LLMError, match="server returned an error"):
        wire.parse_openai_response({"error": {"message": "context too long"}}, source="t")
