"""Tool use: the calculator, the generation loop that lets a model call it, the masks that keep the
environment's tokens out of a loss, and GRPO on a task with a tool."""

from __future__ import annotations

import json
import random

import pytest
import torch

from conftest import write_tiny_task
from rlbench.engines import hf_generate
from rlbench.engines.hf_generate import Completion
from rlbench.engines.sampling import SamplingParams
from rlbench.envs.calculator import calculate
from rlbench.models.tokenizer import DEFAULT_ALPHABET, build_char_tokenizer


def test_calculator_computes_integers_and_refuses_the_rest():
    assert calculate("12*3") == "36" and calculate("(3+4)*5-1") == "34" and calculate(" -7+2 ") == "-5"
    assert calculate("17//5") == "3" and calculate("17%5") == "2"
    for bad in ("2**10", "1//0", "3.5*2", "__import__('os')", "x+1", "", "9" * 70, "99999999*99999999"):
        assert calculate(bad) == "?", bad


def test_calc_reward_reads_the_answer_after_the_last_call():
    from rlbench.rewards import get_reward

    f = get_reward("calc_exact")
    assert f("[874*51]44574", "44574") == 1.0 and f("44574", "44574") == 1.0
    assert f("[874*51]44574", "874") == 0.0  # the copied operand is not an answer
    assert f("[874*5]4370[4370*10+4]43704", "43704") == 1.0 and f("[874*51]?", "44574") == 0.0


def test_calc_generator_families_and_hidden_trace():
    from rlbench.data.generators.calc import generate
    from rlbench.harness.workspace import visible_items
    from rlbench.tasks.spec import RewardAccess, TaskConfig

    rng = random.Random(0)
    items = [generate("main", rng, {"tool_share": 0.5}) for _ in range(200)]
    assert all(int(it["answer"]) == eval(it["prompt"][:-1]) for it in items)  # noqa: S307 - our own digits
    assert 40 < sum(it["trace"].startswith("[") for it in items) < 160
    held = generate("heldout", rng, {})
    assert "+" in held["prompt"] and int(held["answer"]) == eval(held["prompt"][:-1])  # noqa: S307
    task = TaskConfig(name="t", version="1", category="specialization", difficulty="easy", kind="implement")
    task.reward.access = RewardAccess.endpoint
    assert all(set(it) == {"prompt", "family"} for it in visible_items(task, items))


def _scripted(monkeypatch, tok, script: dict[str, str]):
    """hf_generate.generate replaced by a model that writes script[prompt] (stopping after a stop
    token, as the real loop's rounds do). Each round must come without the tool (the loop, not the
    round, answers calls) and with the tool's stop token."""
    calls = []

    def fake(model, tokenizer, prompts, sampling=SamplingParams(), *, with_logprobs=False, **kw):
        assert not sampling.tool and sampling.stop_ids, sampling
        calls.append(list(prompts))
        out = []
        for i, p in enumerate(prompts):
            ids = tok(script[p], add_special_tokens=False)["input_ids"][:sampling.max_new_tokens]
            out.append([Completion(i, list(ids), tok.decode(ids), [-0.5] * len(ids) if with_logprobs else [])
                        for _ in range(sampling.per_prompt)])
        return out

    monkeypatch.setattr(hf_generate, "generate", fake)
    return calls


def test_tool_loop_writes_values_masks_them_and_limits_calls(monkeypatch):
    tok = build_char_tokenizer(DEFAULT_ALPHABET)
    calls = _scripted(monkeypatch, tok, {
        "12*3=": "[12*3]", "12*3=[12*3]36": "",  # one call, then the model stops
        "5*5=": "25",  # no call
        "2*2=": "[2*2]", "2*2=[2*2]4": "[4*4]", "2*2=[2*2]4[4*4]16": "[1+1]",  # a third call is not answered
    })
    out = hf_generate._generate_with_tool(None, tok, ["12*3=", "5*5=", "2*2="],
                                          SamplingParams(n=2, max_new_tokens=20, tool="calculator", max_calls=2),
                                          batch_size=8, with_logprobs=True, on_batch=None)
    a, b, c = out[0][0], out[1][1], out[2][0]
    assert a.text == "[12*3]36" and a.tool_mask == [1] * 6 + [0, 0] and a.tool_calls == 1
    assert len(a.logprobs) == len(a.token_ids) and a.logprobs[6:] == [0.0, 0.0]
    assert b.text == "25" and b.tool_mask == [1, 1] and b.tool_calls == 0
    assert c.text == "[2*2]4[4*4]16[1+1]" and c.tool_calls == 2
    assert c.tool_mask == [1] * 5 + [0] + [1] * 5 + [0, 0] + [1] * 5
    assert len(calls) == 3  # the first round, then one round per call
    # the environment's tokens count against max_new_tokens, and a cut completion stops there
    out = hf_generate._generate_with_tool(None, tok, ["12*3="],
                                          SamplingParams(max_new_tokens=7, greedy=True, tool="calculator", max_calls=2),
                                          batch_size=8, with_logprobs=False, on_batch=None)
    assert out[0][0].text == "[12*3]3" and out[0][0].tool_mask == [1] * 6 + [0]


def test_tool_masks_reach_the_training_batches():
    from reference_pipelines.common import build_group_batch, build_sequences

    tok = build_char_tokenizer(DEFAULT_ALPHABET)
    comps = [tok("[1*2]2", add_special_tokens=False)["input_ids"], tok("7", add_special_tokens=False)["input_ids"]]
    masks = [[1] * 5 + [0], [1]]
    g = build_group_batch(tok, ["1*2="], comps, 2, 20, masks)
    assert g.mask[0, :7].tolist() == [1, 1, 1, 1, 1, 0, 1] and g.mask[1, :3].tolist() == [1, 1, 0]
    assert torch.equal(g.full().mask.sum(-1), g.mask.sum(-1))
    s = build_sequences(tok, ["1*2=", "1*2="], comps, 20, masks)
    assert s.mask.sum(-1).tolist() == [6.0, 2.0]
    with pytest.raises(ValueError, match="tool mask"):
        build_sequences(tok, ["1*2="], comps[:1], 20, [[1, 0]])


def test_grpo_runs_on_a_task_with_a_tool_and_other_pipelines_refuse(tmp_path, session_tasks):
    from reference_pipelines.registry import load_pipeline_config, run_pipeline

    write_tiny_task(session_tasks, "calc-tiny", reward={"name": "calc_exact"},
                    tools={"name": "calculator", "max_calls": 2})
    out = tmp_path / "grpo"
    base = ["task=calc-tiny", "model=arith-tiny", "num_threads=1", "batch_prompts=4", "eval_every=2", "eval_prompts=10"]
    run_pipeline("grpo", load_pipeline_config("grpo", base + ["group_size=2", "steps=2", f"out={out}"]))
    steps = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    assert len([s for s in steps if "reward_mean" in s]) == 2 and (out / "checkpoint" / "config.json").is_file()
    with pytest.raises(ValueError, match="tool"):
        run_pipeline("ppo", load_pipeline_config("ppo", base + ["steps=1", f"out={tmp_path / 'ppo'}"]))


def test_harness_scores_with_the_tool_loop(session_tasks):
    from rlbench.evaluation.baseline import evaluate_model
    from rlbench.models.zoo import resolve_model
    from rlbench.tasks.registry import load_task

    write_tiny_task(session_tasks, "calc-tiny", reward={"name": "calc_exact"},
                    tools={"name": "calculator", "max_calls": 2})
    task = load_task("calc-tiny")
    seen = []
    real = hf_generate._generate_with_tool

    def spy(*a, **kw):
        seen.append(a[3].tool)
        return real(*a, **kw)

    import unittest.mock as mock

    with mock.patch.object(hf_generate, "_generate_with_tool", spy):
        r = evaluate_model(resolve_model("arith-tiny").location, task, ("dev",))
    assert seen and set(seen) == {"calculator"}
    assert 0.0 <= r["scores"]["dev"]["pass_at_1"] <= 1.0


def test_textgame_rules_replay_and_reward():
    from rlbench.data.generators.textgame import best_action, generate
    from rlbench.envs.textgame import State, layout, observe, prompt_of, step
    from rlbench.rewards import get_reward

    lay = layout(794772, 5)
    assert lay == layout(794772, 5) and lay != layout(794773, 5)
    assert len(lay.edges) == 5 and sum(len(v) for v in lay.edges.values()) == 2 * 4  # a tree
    assert lay.start not in (lay.key, lay.door) and lay.key != lay.door
    # the shortest play wins; the reward replays the actions, whatever text claims a win
    st, text = State(lay.start), ""
    while not st.won:
        act = best_action(lay, st)
        st = step(lay, st, act)
        text += f"{act};{observe(lay, st)}"
    win = get_reward("game_win")
    assert text.endswith("WIN") and win(text, "794772.5") == 1.0
    assert win("k;WIN", "794772.5") == 0.0  # a WIN the environment did not write
    assert win(text, "794773.5") == 0.0  # another game's layout
    wander = "".join(f"{r};" for r in "ABCDEFGHABCDE")
    assert win(wander, "794772.5") == 0.0
    assert prompt_of(794772, 5).startswith("794772.5|") and prompt_of(794772, 5).endswith(">")
    rng = random.Random(1)
    assert {generate("heldout", rng, {})["answer"].split(".")[1] for _ in range(20)} == {"6"}
    assert {generate("main", rng, {})["answer"].split(".")[1] for _ in range(40)} == {"4", "5"}


def test_textgame_environment_answers_each_action(monkeypatch):
    from rlbench.envs.textgame import State, layout, observe, prompt_of, step

    tok = build_char_tokenizer(DEFAULT_ALPHABET)
    lay = layout(12, 4)
    prompt = prompt_of(12, 4)
    exit_ = lay.edges[lay.start][0]
    moved = observe(lay, step(lay, State(lay.start), exit_))
    stay = observe(lay, State(lay.start))
    _scripted(monkeypatch, tok, {prompt: f"{exit_};", prompt + f"{exit_};{moved}": "q;",
                                 prompt + f"{exit_};{moved}q;{moved}": ""})
    out = hf_generate._generate_with_tool(None, tok, [prompt],
                                          SamplingParams(max_new_tokens=60, greedy=True, tool="textgame", max_calls=12),
                                          batch_size=8, with_logprobs=False, on_batch=None)
    c = out[0][0]
    assert c.text == f"{exit_};{moved}q;{moved}" and c.tool_calls == 2 and stay.endswith(">")
    assert c.tool_mask == [1, 1] + [0] * len(moved) + [1, 1] + [0] * len(moved)


def test_calibration_plays_a_tool_corpus_by_its_rules(monkeypatch):
    """A base model pretrained on game transcripts is calibrated with the game's 12 actions: with
    generate's default of two calls an expert player lost every game (game-s read 0.0%)."""
    from rlbench.data.generators import corpus_format, corpus_tool, resolve_generator
    from rlbench.data.generators.textgame import best_action
    from rlbench.envs.textgame import layout, parse_prompt, replay
    from rlbench.models.pretrain import calibration_accuracy

    tok = build_char_tokenizer(DEFAULT_ALPHABET)

    calls_allowed = []

    def expert(model, tokenizer, prompts, sampling=SamplingParams(), **kw):  # knows every layout: the shortest way
        out = []
        for i, p in enumerate(prompts):
            start = p.index(">") + 1
            st, _ = replay(p[:start], p[start:], 12)
            act = best_action(layout(*parse_prompt(p[:start])), st) + ";"
            ids = tok(act, add_special_tokens=False)["input_ids"]
            out.append([Completion(i, list(ids), act, []) for _ in range(sampling.per_prompt)])
        return out

    real_loop = hf_generate._generate_with_tool

    def loop_spy(model, tokenizer, prompts, sampling, **kw):
        calls_allowed.append(sampling.max_calls)
        return real_loop(model, tokenizer, prompts, sampling, **kw)

    monkeypatch.setattr(hf_generate, "_generate_with_tool", loop_spy)

    monkeypatch.setattr(hf_generate, "generate", expert)
    gen = resolve_generator("textgame")
    assert corpus_tool(gen) == {"tool": "textgame", "max_calls": 12}
    assert corpus_tool(resolve_generator("arith")) == {}
    items = [gen("main", random.Random(i), {}) for i in range(20)]
    fmt = dict(zip(("reward", "max_new_tokens"), corpus_format(gen)))
    assert calibration_accuracy(None, tok, items, **fmt, **corpus_tool(gen)) == 1.0
    assert calibration_accuracy(None, tok, items, **fmt, tool="textgame", max_calls=2) < 0.5
    assert calls_allowed == [12, 2]  # the corpus's call limit reached the loop, then the default one


def test_kl_counts_the_models_tokens_only():
    """The KL's scored tokens: the environment's are masked out, the ending EOS is the model's
    unless the completion was cut at the token limit or ended at a call past the last one."""
    from rlbench.evaluation.kl import _sequence_logprobs, scored_tokens

    eos, stop = 2, 9
    with_answer = Completion(0, [5, 6, stop, 7, 7, 8], "", tool_mask=[1, 1, 1, 0, 0, 1], tool_calls=1)
    assert scored_tokens(with_answer, 16, eos, stop) == ([5, 6, stop, 7, 7, 8, eos], [1, 1, 1, 0, 0, 1, 1])
    assert scored_tokens(with_answer, 6, eos, stop) == ([5, 6, stop, 7, 7, 8], [1, 1, 1, 0, 0, 1])  # cut at the limit
    out_of_calls = Completion(0, [5, stop, 7, stop], "", tool_mask=[1, 1, 0, 1], tool_calls=1)
    assert scored_tokens(out_of_calls, 16, eos, stop) == ([5, stop, 7, stop], [1, 1, 0, 1])
    answer_ends_in_stop = Completion(0, [5, stop, stop], "", tool_mask=[1, 1, 0], tool_calls=1)
    assert scored_tokens(answer_ends_in_stop, 16, eos, stop)[1] == [1, 1, 0, 1]  # then the model wrote EOS
    assert scored_tokens(Completion(0, [5, 6], ""), 16, eos) == ([5, 6, eos], [1, 1, 1])  # no tool: all the model's
    with pytest.raises(ValueError, match="tool mask"):
        scored_tokens(Completion(0, [5, 6], "", tool_mask=[1]), 16, eos, stop)

    tok = build_char_tokenizer(DEFAULT_ALPHABET)
    torch.manual_seed(0)
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32))
    row = tok("12+5=")["input_ids"] + [7, 8, 9, 10]
    start = len(row) - 4
    every = _sequence_logprobs(model, [row], [start], [[1, 1, 1, 1]], tok.pad_token_id)[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([row])).logits[0, :-1].float()
    per_token = torch.log_softmax(logits, -1).gather(-1, torch.tensor(row[1:]).unsqueeze(-1)).squeeze(-1)[start - 1:]
    assert every == pytest.approx(float(per_token.sum()), abs=1e-5)
    two_masked = _sequence_logprobs(model, [row], [start], [[1, 0, 0, 1]], tok.pad_token_id)[0]
    assert two_masked == pytest.approx(float(per_token[0] + per_token[3]), abs=1e-5)


def test_kl_on_a_tool_task_samples_through_the_tool_loop(session_tasks):
    """The harness's KL on a task with a tool generates as the harness scores (the tool loop) and
    scores exactly the tokens scored_tokens keeps; a model against itself is at zero."""
    import unittest.mock as mock

    from rlbench.data.splits import prepare_data
    from rlbench.evaluation import kl
    from rlbench.models.zoo import resolve_model
    from rlbench.tasks.registry import load_task, task_dir

    write_tiny_task(session_tasks, "calc-tiny", reward={"name": "calc_exact"},
                    tools={"name": "calculator", "max_calls": 2}, constraints={"max_kl": 0.5})
    task = load_task("calc-tiny")  # a KL limit on a tool task is allowed now that the estimate masks tool tokens
    items = prepare_data(task, task_dir("calc-tiny")).splits["dev"][:12]
    tools_seen, masks_seen = [], []
    real_tool, real_lp = hf_generate._generate_with_tool, kl._sequence_logprobs

    def tool_spy(*a, **kw):
        out = real_tool(*a, **kw)
        tools_seen.append(out)
        return out

    def lp_spy(model, rows, starts, masks, pad):
        masks_seen.extend(masks)
        return real_lp(model, rows, starts, masks, pad)

    base = resolve_model("arith-tiny").location
    with mock.patch.object(hf_generate, "_generate_with_tool", tool_spy), mock.patch.object(kl, "_sequence_logprobs", lp_spy):
        r = kl.kl_to_base(base, base, task, items, samples=2)
    assert r["tool"] == "calculator" and r["n"] == 12 and r["kl"] == 0.0 and r["ci_low"] == r["ci_high"] == 0.0
    from rlbench.models.zoo import load_model

    _, tokenizer, _ = load_model(base)
    stop = tokenizer("]", add_special_tokens=False)["input_ids"][0]
    comps = [c for per_prompt in tools_seen[0] for c in per_prompt]
    expected = [kl.scored_tokens(c, task.eval.max_new_tokens, tokenizer.eos_token_id, stop)[1] for c in comps]
    assert masks_seen[: len(expected)] == expected and len(masks_seen) == 2 * len(expected)  # trained and base
