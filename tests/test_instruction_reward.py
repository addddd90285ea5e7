"""The instruction-following reward (rlbench/rewards/instructions.py): IFEval's own checkers, an
answer in either hub layout, the same score on every machine, and a task refused before any work
where its items cannot be checked here."""

from __future__ import annotations

import json
import random

import pytest

from conftest import REPO, assert_make_py_rebuilds
from rlbench.config.core import ConfigError
from rlbench.rewards import check_answers, check_reward, get_reward, score_many
from rlbench.rewards.instructions import (check_instruction_answers, if_instructions, instruction_scores,
                                          missing_nltk_data, parse_answer)

STANDIN = REPO / "tasks" / "ifeval-grpo" / "standin"


def answer(ids, kwargs, prompt="Write about owls.") -> str:
    return json.dumps({"instruction_id_list": ids, "kwargs": kwargs, "prompt": prompt})


def test_an_answer_reads_in_both_hub_layouts():
    """argilla/ifeval-like-data stores kwargs as JSON text; google/IFEval's are objects whose unset keys
    `datasets` fills with nulls. Both are one dict per instruction, nulls dropped."""
    argilla = parse_answer(answer(["punctuation:no_comma", "keywords:existence"], json.dumps([{}, {"keywords": ["owl"]}])))
    ifeval = parse_answer(answer(["punctuation:no_comma", "keywords:existence"],
                                 [{"keywords": None, "num_words": None}, {"keywords": ["owl"], "num_words": None}]))
    assert argilla == ifeval
    assert argilla.ids == ("punctuation:no_comma", "keywords:existence") and argilla.kwargs == ({}, {"keywords": ["owl"]})
    assert parse_answer(json.dumps({"instruction_id_list": ["detectable_format:title"]})).kwargs == ({},)


@pytest.mark.parametrize("bad, why", [
    ("not json", "not JSON"),
    (json.dumps(["punctuation:no_comma"]), "not an object"),
    (answer([], []), "1-32 ids"),
    (answer(["punctuation:no_comma"] * 33, [{}] * 33), "1-32 ids"),
    (answer(["punctuation:no_comma", "detectable_format:title"], [{}]), "one object per instruction"),
    (answer(["punctuation:no_comma"], [7]), "one object per instruction"),
    (answer(["format:made_up"], [{}]), "not one of IFEval's 25"),
])
def test_a_malformed_answer_is_refused_with_the_reason(bad, why):
    """An unknown id is refused, not skipped as IFEval's loop would: a skipped instruction scores as followed."""
    with pytest.raises(ValueError, match=why):
        parse_answer(bad)
    with pytest.raises(ConfigError, match=why):
        check_instruction_answers([("test", bad)])


def test_a_reply_scores_by_ifevals_checkers_strict_and_loose():
    lower = answer(["change_case:english_lowercase", "punctuation:no_comma"], [{}, {}])
    assert if_instructions("owls hunt at night and sleep by day.", lower) == 1.0
    assert if_instructions("owls hunt at night, and sleep by day.", lower) == 0.0  # a comma
    assert instruction_scores("owls hunt at night, and sleep by day.", lower)["partial_strict"] == 0.5
    # IFEval's loose mode also tries the reply without its first line: a chatty opener fails strict only
    chatty = "Sure! Here it is:\nowls hunt at night and sleep by day."
    assert instruction_scores(chatty, lower) == {"binary_strict": 0.0, "binary_loose": 1.0,
                                                 "partial_strict": 0.5, "partial_loose": 1.0}
    assert if_instructions(chatty, lower, score="binary_loose") == 1.0
    title = answer(["detectable_format:title", "startend:end_checker"], [{}, {"end_phrase": "Any other questions?"}])
    assert if_instructions("<<owls>>\nThey hunt at night. Any other questions?", title) == 1.0
    assert if_instructions("They hunt at night. Any other questions?", title) == 0.0
    assert if_instructions("", title) == 0.0 and if_instructions("   \n", lower) == 0.0
    assert if_instructions("<think>plan</think>owls hunt at night.", lower) == 1.0  # a reasoning block is not the reply


def test_an_unset_argument_is_drawn_the_same_way_every_time_and_leaves_random_alone():
    """IFEval draws a random value for an argument the item leaves unset: here the draw is seeded by
    the instruction, so a score never depends on the process's random state, which it does not move."""
    item = answer(["keywords:letter_frequency"], [{}])
    replies = ["zzzzzzzz qqqq xxxx jjjj", "a b c", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa eeeeeeeeeeeeeeeeeeeeeeeee"]
    random.seed(1)
    first = [if_instructions(r, item) for r in replies]
    state = random.getstate()
    random.seed(99)
    random.random()
    again = [if_instructions(r, item) for r in replies]
    random.seed(1)
    [if_instructions(r, item) for r in replies]
    assert first == again and random.getstate() == state


def test_the_reward_is_registered_with_its_param_checked_and_scores_in_batches():
    assert get_reward("if_instructions") is if_instructions
    check_reward("if_instructions", {"score": "partial_loose"})
    with pytest.raises(ConfigError, match="reward.params.score"):
        check_reward("if_instructions", {"score": "mean"})
    with pytest.raises(ConfigError, match="not a param"):
        check_reward("if_instructions", {"timeout_s": 3})
    lower = answer(["change_case:english_lowercase"], [{}])
    assert score_many("if_instructions", {"score": "binary_strict"}, ["all lower.", "Not Lower."], [lower, lower]) == [1.0, 0.0]


def test_items_whose_checkers_need_nltk_data_are_refused_where_it_is_missing(tmp_path, monkeypatch):
    """IFEval's sentence counter tokenizes with NLTK's punkt_tab: data, not code. A task holding
    such items is refused with the command that fetches it, never scored without it (or with another
    tokenizer), and checks once it lies in RLBENCH_HOME/nltk_data."""
    import nltk
    from if_verifiable.ifeval import instructions_util

    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path))
    # NLTK searches only RLBENCH_HOME here, whatever data this machine holds elsewhere or has loaded
    monkeypatch.setattr(nltk.data, "path", [])
    monkeypatch.setattr(nltk.data, "_resource_cache", {})
    instructions_util._get_sentence_tokenizer.cache_clear()
    needs = answer(["length_constraints:number_sentences"], [{"num_sentences": 3, "relation": "less than"}])
    check_instruction_answers([("train", answer(["punctuation:no_comma"], [{}]))])  # no data needed
    with pytest.raises(ConfigError, match=r"number_sentences.*punkt_tab.*nltk\.downloader -d .*nltk_data punkt_tab"):
        check_answers("if_instructions", {"heldout": [{"answer": needs}]})
    with pytest.raises(LookupError):  # scoring without it raises rather than counting it as not followed
        if_instructions("One. Two.", needs)
    (tmp_path / "nltk_data" / "tokenizers" / "punkt_tab" / "english").mkdir(parents=True)
    assert missing_nltk_data(["length_constraints:number_sentences"]) == []
    check_answers("exact_number", {"test": [{"answer": "not json at all"}]})  # other rewards check nothing


def test_a_huge_or_hostile_reply_scores_quickly():
    """A reply is the trained model's, so the agent's: the checkers' work grows with its length only."""
    import time

    every = answer(["punctuation:no_comma", "change_case:english_lowercase", "keywords:existence",
                    "keywords:forbidden_words", "keywords:letter_frequency", "detectable_format:number_bullet_lists",
                    "detectable_format:title", "detectable_format:json_format", "startend:quotation",
                    "detectable_content:postscript", "language:response_language", "length_constraints:number_words",
                    "detectable_format:multiple_sections", "length_constraints:number_paragraphs"],
                   [{}, {}, {"keywords": ["owl"]}, {"forbidden_words": ["bat"]},
                    {"letter": "z", "let_frequency": 3, "let_relation": "less than"}, {"num_bullets": 2}, {}, {}, {},
                    {"postscript_marker": "P.S."}, {"language": "en"}, {"num_words": 50, "relation": "less than"},
                    {"section_spliter": "Section", "num_sections": 2}, {"num_paragraphs": 2}])
    replies = ["<<" * 20000 + "\n" + "* a\n" * 20000, "{" * 50000 + '"' * 50000, "***\n" * 30000, "owl " * 60000,
               "P.S." * 30000 + "Section 1" * 10000]
    t = time.time()
    assert all(if_instructions(r, every) == 0.0 for r in replies)
    assert time.time() - t < 30


def test_every_standin_item_is_followed_by_its_response_and_not_by_a_plain_reply():
    import datasets

    like = datasets.load_dataset(str(STANDIN / "ifeval-like-data"), "filtered", split="train")
    ifeval = datasets.load_dataset(str(STANDIN / "IFEval"), split="train")
    assert (len(like), len(ifeval)) == (600, 60)
    fields = ("instruction_id_list", "kwargs", "prompt")
    for row in like:
        assert if_instructions(row["response"], json.dumps({f: row[f] for f in fields})) == 1.0, row
    plain = [if_instructions("Owls, bats and moths fly at night.", json.dumps({f: r[f] for f in fields}, default=str))
             for r in ifeval]
    assert sum(plain) < len(plain) / 2
    assert not missing_nltk_data({i for r in list(like) + list(ifeval) for i in r["instruction_id_list"]})


def test_the_committed_standins_are_what_make_py_builds(tmp_path):
    assert_make_py_rebuilds(STANDIN, tmp_path)
