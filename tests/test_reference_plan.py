"""The reference agent's plan, against a scripted ToolBox: what it runs, in what box, and what it
submits with which recipe (the runs themselves are tested in test_harness and by validation)."""

import json

from rlbench.agents.reference import ReferenceAgent


class ScriptedTools:
    """The ToolBox calls the reference agent makes, answered from a script."""

    def __init__(self, task, train_item, summary, refuse=(), queries_left=None, devs=None):
        self.task, self.train_item, self.summary, self.refuse = task, train_item, summary, set(refuse)
        self.devs = devs or {}  # dev score by submitted path (0.7 for any other)
        self.queries_left = queries_left
        self.calls = []

    def read(self, path, max_bytes=200_000):
        self.calls.append(("read", path))
        content = {"task.json": json.dumps(self.task), "data/train.jsonl": json.dumps(self.train_item) + "\n"}.get(path)
        if path.endswith("summary.json"):
            content = json.dumps(self.summary)
        return {"ok": content is not None, "content": content}

    def write(self, path, content):
        self.calls.append(("write", path))
        return {"ok": True}

    def exec(self, command, timeout=None):
        self.calls.append(("exec", command))
        return {"ok": True, "stdout": "", "stderr": ""}

    def remaining(self):
        return 1100.0

    def status(self):
        self.calls.append(("status", ""))
        return {"ok": True, **({"reward_queries_left": self.queries_left} if self.queries_left is not None else {})}

    def submit(self, path, recipe=""):
        self.calls.append(("submit", path, recipe))
        if path in self.refuse:
            return {"ok": False, "reason": "lineage: weight 'w' lies 0.77 (relative L2) from the base model's"}
        return {"ok": True, "dev": self.devs.get(path, 0.7), "dev_ci": [0.6, 0.8]}


LOCAL = {"name": "arith-grpo", "reward": {"name": "exact_int", "access": "local"}}
SUMMARY = {"steps": 1841, "stopped_by": "max_seconds", "first_reward": 0.3, "first_reward_mean_50": 0.35,
           "last_reward_mean_50": 0.7}


def test_first_attempt_warms_up_on_answers_in_a_300_s_box_and_names_its_steps_in_the_recipe():
    tools = ScriptedTools(LOCAL, {"prompt": "1+2=", "answer": "3"}, SUMMARY)
    ReferenceAgent().run("", tools)
    (command,) = [c[1] for c in tools.calls if c[0] == "exec"]
    assert command == "python train.py sft_steps=300 steps=5000 save_every=400 max_seconds=300 out=runs/attempt1 seed=0"
    base, sub = [c for c in tools.calls if c[0] == "submit"]
    assert base[1] == "model"  # the base first: its dev score is the bar
    # a rerun as fast as this run makes the same 1841 steps; a slower one (a larger model) stops by time
    assert sub[1:] == ("runs/attempt1/checkpoint", "python train.py sft_steps=300 steps=1841 save_every=400 "
                       "max_seconds=600 out=runs/attempt1 seed={seed}")
    assert ("status", "") not in tools.calls  # local rewards: no query budget to read


def test_a_lineage_refusal_falls_back_to_the_latest_saved_step_that_passes():
    refuse = {"runs/attempt1/checkpoint", "runs/attempt1/checkpoint-1600"}
    tools = ScriptedTools(LOCAL, {"prompt": "1+2=", "answer": "3"}, SUMMARY, refuse=refuse)
    ReferenceAgent().run("", tools)
    subs = [c for c in tools.calls if c[0] == "submit"]
    assert [s[1] for s in subs] == ["model", "runs/attempt1/checkpoint", "runs/attempt1/checkpoint-1600",
                                    "runs/attempt1/checkpoint-1200"]
    assert "steps=1200 " in subs[-1][2]  # the recipe of the same run stopped at that step
    assert sum(c[0] == "exec" for c in tools.calls) == 1  # accepted: no further attempt


def test_answers_that_are_tests_get_no_warm_up():
    task = {"name": "list-program", "reward": {"name": "list_program", "access": "local"}}
    tools = ScriptedTools(task, {"prompt": "sort:", "answer": '{"inputs": [[2, 1]], "outputs": [[1, 2]]}'}, SUMMARY)
    ReferenceAgent().run("", tools)
    (command,) = [c[1] for c in tools.calls if c[0] == "exec"]
    assert command.startswith("python train.py steps=5000 ") and "sft_steps" not in command


def test_endpoint_rewards_cap_the_steps_and_without_answers_there_is_no_warm_up():
    task = {"name": "format-if", "reward": {"access": "endpoint"}}
    tools = ScriptedTools(task, {"prompt": "Write"}, {**SUMMARY, "stopped_by": "steps"}, queries_left=80_000)
    ReferenceAgent().run("", tools)
    (command,) = [c[1] for c in tools.calls if c[0] == "exec"]
    # 90% of 80,000 queries at 16 prompts x 8 completions a step
    assert command.startswith("python train.py steps=562 save_every=400 max_seconds=300 ") and "sft_steps" not in command


def test_a_run_whose_reward_stays_flat_is_not_submitted_and_the_next_attempt_runs():
    flat = {**SUMMARY, "first_reward": 0.0, "first_reward_mean_50": 0.0, "last_reward_mean_50": 0.0}
    tools = ScriptedTools(LOCAL, {"prompt": "1+2="}, flat)  # no answers: GRPO alone, no warm-up
    ReferenceAgent().run("", tools)
    execs = [c[1] for c in tools.calls if c[0] == "exec"]
    assert len(execs) == 3 and "runs/attempt2" in execs[1] and "runs/attempt3" in execs[2]
    assert "sft_steps" not in execs[0]
    assert [c[1] for c in tools.calls if c[0] == "submit"] == ["model"]  # nothing learned: the base


def test_a_warmed_up_run_whose_grpo_reward_stays_flat_is_judged_by_its_dev_score():
    """After SFT the GRPO reward may start at its ceiling and stay there (honest-arith, seed 2:
    0.978 -> 0.976, dev 0.99 against the base's 0.78): the run is submitted, not skipped."""
    flat = {**SUMMARY, "first_reward": 0.98, "first_reward_mean_50": 0.978, "last_reward_mean_50": 0.976}
    devs = {"model": 0.78, "runs/attempt1/checkpoint": 0.99}
    tools = ScriptedTools(LOCAL, {"prompt": "1+2=", "answer": "3"}, flat, devs=devs)
    ReferenceAgent().run("", tools)
    execs = [c[1] for c in tools.calls if c[0] == "exec"]
    assert len(execs) == 1 and "sft_steps=300" in execs[0]
    assert [c[1] for c in tools.calls if c[0] == "submit"] == ["model", "runs/attempt1/checkpoint"]
    # below the base on dev, the plan goes on to the next attempt as for any run
    tools = ScriptedTools(LOCAL, {"prompt": "1+2=", "answer": "3"}, flat, devs={**devs, "runs/attempt1/checkpoint": 0.5})
    ReferenceAgent().run("", tools)
    assert sum(c[0] == "exec" and "train.py" in c[1] for c in tools.calls) == 3


def test_a_checkpoint_below_the_base_on_dev_does_not_end_the_plan():
    devs = {"model": 0.5, "runs/attempt1/checkpoint": 0.4, "runs/attempt2/checkpoint": 0.45, "runs/attempt3/checkpoint": 0.3}
    tools = ScriptedTools(LOCAL, {"prompt": "1+2=", "answer": "3"}, SUMMARY, devs=devs)
    ReferenceAgent().run("", tools)
    # every attempt runs; the harness scores the best dev submission, here the base
    assert [c[1] for c in tools.calls if c[0] == "submit"] == ["model"] + [f"runs/attempt{i}/checkpoint" for i in (1, 2, 3)]
    tools = ScriptedTools(LOCAL, {"prompt": "1+2=", "answer": "3"}, SUMMARY, devs={**devs, "runs/attempt2/checkpoint": 0.6})
    ReferenceAgent().run("", tools)
    assert [c[1] for c in tools.calls if c[0] == "submit"][-1] == "runs/attempt2/checkpoint"  # above the base: done
    assert sum(c[0] == "exec" for c in tools.calls) == 2


def test_without_base_first_the_base_is_submitted_only_when_nothing_trains():
    tools = ScriptedTools(LOCAL, {"prompt": "1+2=", "answer": "3"}, SUMMARY)
    ReferenceAgent(base_first=False).run("", tools)
    assert [c[1] for c in tools.calls if c[0] == "submit"] == ["runs/attempt1/checkpoint"]
    flat = {**SUMMARY, "first_reward_mean_50": 0.0, "last_reward_mean_50": 0.0}
    tools = ScriptedTools(LOCAL, {"prompt": "1+2="}, flat)  # GRPO alone (no answers to warm up on)
    ReferenceAgent(base_first="false").run("", tools)
    assert [c[1] for c in tools.calls if c[0] == "submit"] == ["model"]


def test_dpo_on_pairs_is_not_capped_by_the_reward_queries_it_never_makes():
    """pref-ppo's rewards come from the endpoint and it grants no queries: the step cap meant for
    GRPO's rewards cut the reference's DPO runs to 1 step each (revalidation, 2026-12-07)."""
    task = {"name": "pref-ppo", "reward": {"name": "int_closeness", "access": "endpoint"}}
    pair = {"prompt": "35+30=", "chosen": "60", "rejected": "95"}
    tools = ScriptedTools(task, pair, {"steps": 150, "stopped_by": "steps"}, queries_left=0)
    ReferenceAgent().run("", tools)
    first = next(c[1] for c in tools.calls if c[0] == "exec")
    assert first.startswith("python train.py steps=150 pairs=data/train.jsonl ") and ("status", "") not in tools.calls


def test_only_sampling_algorithms_are_capped_by_the_reward_queries():
    """SFT learns from the answers and never asks the endpoint; PPO samples and does."""
    task = {"name": "format-if", "reward": {"name": "int_closeness", "access": "endpoint"}}
    firsts = {}
    for algo in ("sft", "ppo"):
        tools = ScriptedTools(task, {"prompt": "1+2=", "answer": "3"}, {"steps": 500, "stopped_by": "steps"},
                              queries_left=1280)
        ReferenceAgent(algo=algo).run("", tools)
        firsts[algo] = next(c[1] for c in tools.calls if c[0] == "exec")
    assert firsts["sft"].startswith("python train.py steps=5000 ")  # the plan's own steps, uncapped
    assert firsts["ppo"].startswith("python train.py steps=9 ")  # 90% of 1,280 queries at 16 x 8 a step
