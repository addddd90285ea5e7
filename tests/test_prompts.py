"""Real-format data and prompts: GSM8K-shaped files loaded through HF `datasets` (dev a slice of
train, heldout from an SVAMP-shaped file of its own), and prompts rendered once, through a Qwen2
stand-in's chat template, into the stored splits every reader uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlbench.config.core import ConfigError, load_config
from rlbench.data.prompts import render_splits
from rlbench.data.splits import data_key, prepare_data
from rlbench.tasks.spec import PromptConfig, TaskConfig


def _gsm8k_row(i: int) -> dict:
    a, b = 10 + i, 3 + i % 7
    return {"question": f"Tom has {a} apples and buys {b} more. How many apples does he have now?",
            "answer": f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"}


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    from rlbench.models.standin import build_chat_standin

    return build_chat_standin(tmp_path_factory.mktemp("qwen2-standin"))


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """GSM8K's two files (question, answer with `#### N`) and SVAMP's (Body, Question, Answer)."""
    out = {"train": tmp_path / "gsm8k" / "train.jsonl", "test": tmp_path / "gsm8k" / "test.jsonl",
           "svamp": tmp_path / "svamp" / "test.json"}
    for p in out.values():
        p.parent.mkdir(parents=True, exist_ok=True)
    out["train"].write_text("".join(json.dumps(_gsm8k_row(i)) + "\n" for i in range(20)))
    out["test"].write_text("".join(json.dumps(_gsm8k_row(100 + i)) + "\n" for i in range(10)))
    out["svamp"].write_text(json.dumps([{"Body": f"There are {n} birds on a tree.", "Question": "How many legs?",
                                         "Answer": float(2 * n)} for n in range(3, 11)]))
    return out


def _task(files: dict[str, Path], base: str, **prompt) -> TaskConfig:
    return load_config(TaskConfig, {**_task_raw(files, base), "prompt": prompt})


def _task_raw(files: dict[str, Path], base: str) -> dict:
    return {"name": "gsm8k-standin", "version": "1", "category": "reasoning", "difficulty": "medium",
           "kind": "implement", "model": {"base": base},
           "data": {"source": "hf", "hf": {
               "path": "json", "data_files": {"train": str(files["train"]), "test": str(files["test"])},
               "splits": {"train": "train[:14]", "dev": "train[14:]", "test": "test", "heldout": "test"},
               "prompt_field": "question", "answer_field": "answer", "answer_extract": "gsm8k",
               "sources": {"heldout": {"data_files": {"test": str(files["svamp"])}, "split": "test",
                                       "prompt_template": "{Body} {Question}", "answer_field": "Answer",
                                       "answer_extract": ""}}}}}


def test_hf_splits_slice_train_for_dev_and_take_heldout_from_another_dataset(files, standin):
    data = prepare_data(_task(files, str(standin)), None)
    sizes = {s: len(data.splits[s]) for s in ("train", "dev", "test", "heldout")}
    assert sizes == {"train": 14, "dev": 6, "test": 10, "heldout": 8}
    assert data.splits["train"][0] == {"prompt": _gsm8k_row(0)["question"], "answer": "13",
                                       "solution": _gsm8k_row(0)["answer"], "id": "train-00000"}
    assert data.splits["dev"][0]["prompt"] == _gsm8k_row(14)["question"]  # dev is train's tail, not a copy of it
    assert data.splits["heldout"][0] == {"prompt": "There are 3 birds on a tree. How many legs?", "answer": "6.0",
                                         "id": "heldout-00000"}
    assert data.splits["test"][0]["answer"] == "115" and data.splits["test"][0]["solution"].endswith("#### 115")
    # the task's verifier reads a real completion's last number against the stored answer, either format
    from rlbench.rewards import get_reward

    reward = get_reward("exact_number")
    assert reward("He has 110 + 5 = 115 apples.\n#### 115", data.splits["test"][0]["answer"]) == 1.0
    assert reward("So the birds have 6 legs.", data.splits["heldout"][0]["answer"]) == 1.0
    assert reward("So the birds have 7 legs.", data.splits["heldout"][0]["answer"]) == 0.0


def test_chat_prompts_are_rendered_once_with_the_bases_template_and_few_shot_examples(files, standin):
    task = _task(files, str(standin), chat=True, system="Solve it; end with #### and the number.", few_shot=2)
    data = prepare_data(task, None, tokenizer_dir=standin)
    train, test = data.splits["train"], data.splits["test"]
    assert len(train) == 12  # the two worked examples left train
    item = test[0]
    assert item["question"] == _gsm8k_row(100)["question"]
    assert item["prompt"].startswith("<|im_start|>system\nSolve it; end with #### and the number.<|im_end|>\n")
    assert item["prompt"].endswith(f"<|im_start|>user\n{item['question']}<|im_end|>\n<|im_start|>assistant\n")
    # the examples are the first two train rows, as user/assistant turns with their worked answers
    assert f"<|im_start|>user\n{_gsm8k_row(0)['question']}<|im_end|>" in item["prompt"]
    assert f"<|im_start|>assistant\n{_gsm8k_row(1)['answer']}<|im_end|>" in item["prompt"]
    assert all(_gsm8k_row(0)["question"] != it["question"] for it in train)
    # stored and read back the same; another prompt config is other stored splits
    again = prepare_data(task, None)  # no tokenizer needed to read what was built
    assert again.fingerprints == data.fingerprints and again.splits["test"][0]["prompt"] == item["prompt"]
    assert data_key(task) != data_key(_task(files, str(standin)))
    # the tokenizer of the stand-in reads the rendered prompt's markers as its special tokens
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(standin))
    ids = tok(item["prompt"])["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 1 + 2 * 2 + 1 + 1  # system, 2 shots, question, reply


def test_a_template_without_chat_and_its_checks(files, standin):
    splits = {"train": [{"prompt": "1+1", "answer": "2"}, {"prompt": "2+2", "answer": "4"}, {"prompt": "3+3", "answer": "6"}],
              "dev": [{"prompt": "4+4", "answer": "8"}]}
    out = render_splits(PromptConfig(template="Q: {prompt}\nA:", few_shot=1), splits, None)
    assert out["dev"][0] == {"prompt": "Q: 1+1\nA: 2\n\nQ: 4+4\nA:", "answer": "8", "question": "4+4"}
    assert [it["question"] for it in out["train"]] == ["2+2", "3+3"]
    assert render_splits(PromptConfig(), splits, None) is splits  # no prompt section: the splits as they are
    with pytest.raises(ConfigError, match="prompt.template"):
        _task(files, str(standin), template="Q: {question}")
    with pytest.raises(ConfigError, match="prompt.system"):
        _task(files, str(standin), system="be brief")
    with pytest.raises(ConfigError, match="need the base model's tokenizer"):
        prepare_data(_task(files, str(standin), chat=True), None)
    with pytest.raises(ConfigError, match="leaves too little"):
        render_splits(PromptConfig(few_shot=2), splits, None)


def test_a_base_without_a_chat_template_is_refused_by_name(files, tmp_path):
    from transformers import AutoTokenizer

    from rlbench.models.standin import build_chat_standin

    folder = build_chat_standin(tmp_path / "plain")
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.chat_template = None
    (folder / "chat_template.jinja").unlink()
    tok.save_pretrained(str(folder))
    with pytest.raises(ConfigError, match="has no chat template"):
        prepare_data(_task(files, str(folder), chat=True), None, tokenizer_dir=folder)


def test_a_tasks_limits_are_floors_of_its_cells_sandbox_and_checkpoint_cap(files, standin):
    from rlbench.harness.environment import checkpoint_mb, sandbox_limits
    from rlbench.sandbox.runner import SandboxConfig

    task = _task(files, str(standin))
    task.limits.memory_gb, task.limits.disk_gb, task.limits.checkpoint_mb = 48.0, 40.0, 8192
    got = sandbox_limits(task, SandboxConfig(memory_gb=64.0), "bwrap")
    assert (got.memory_gb, got.disk_gb, got.max_file_gb, got.tmp_mb) == (64.0, 40.0, 2.0, 1024)  # a cell may give more
    assert checkpoint_mb(task, 2048) == 8192 and checkpoint_mb(task, 10_000) == 10_000
    with pytest.raises(ConfigError, match="limits.memory_gb"):
        load_config(TaskConfig, {**_task_raw(files, str(standin)), "limits": {"memory_gb": 0}})


def test_a_row_whose_answer_the_extractor_cannot_find_is_named(files, standin):
    files["test"].write_text(json.dumps({"question": "How many?", "answer": "no final line here"}) + "\n")
    with pytest.raises(ConfigError, match=r"row test-00000: no answer by 'gsm8k'"):
        prepare_data(_task(files, str(standin)), None)
    with pytest.raises(ConfigError, match="answer_extract"):
        load_config(TaskConfig, {**_task_raw(files, str(standin)),
                                 "data": {"source": "hf", "hf": {"path": "json", "answer_extract": "last_word"}}})
