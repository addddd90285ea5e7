import json

import pytest

from rlbench.config.core import ConfigError
from rlbench.data.splits import fingerprint, generate_splits, prepare_data, split_path
from rlbench.paths import hidden_root, public_root
from rlbench.tasks.registry import load_task, task_dir


def _prompts(splits):
    return {s: {it["prompt"] for it in items} for s, items in splits.items()}


def test_full_size_splits_are_disjoint_and_sized():
    task = load_task("arith-grpo")
    splits = generate_splits(task)
    sizes = task.data.sizes
    assert {s: len(v) for s, v in splits.items()} == {
        "train": sizes.train, "dev": sizes.dev, "test": sizes.test, "heldout": sizes.heldout}
    p = _prompts(splits)
    names = list(p)
    for i, a in enumerate(names):
        assert len(p[a]) == len(splits[a]), f"duplicates inside {a}"
        for b in names[i + 1:]:
            assert not (p[a] & p[b]), f"{a} and {b} share prompts"


def test_heldout_is_shifted_distribution():
    splits = generate_splits(load_task("arith-grpo"))
    for split, larger_first in (("train", True), ("dev", True), ("test", True), ("heldout", False)):
        for it in splits[split]:
            a, b = (int(x) for x in it["prompt"].rstrip("=").split("+"))
            assert a + b == int(it["answer"])
            assert (a >= b) is larger_first, (split, it)


def test_splits_deterministic_per_seed():
    t0 = load_task("arith-grpo")
    a, b = generate_splits(t0), generate_splits(t0)
    assert {s: fingerprint(v) for s, v in a.items()} == {s: fingerprint(v) for s, v in b.items()}
    c = generate_splits(load_task("arith-grpo", ["data.seed=1"]))
    assert fingerprint(a["test"]) != fingerprint(c["test"])


def test_train_size_does_not_change_hidden_splits():
    a = generate_splits(load_task("arith-grpo"))
    b = generate_splits(load_task("arith-grpo", ["data.sizes.train=1000"]))
    assert fingerprint(a["test"]) == fingerprint(b["test"])
    assert fingerprint(a["heldout"]) == fingerprint(b["heldout"])


def test_stored_hidden_splits_live_under_hidden_root(fresh_home):
    task = load_task("arith-tiny")
    data = prepare_data(task, task_dir(task.name))
    for split in ("test", "heldout"):
        path = split_path(task, split)
        assert hidden_root() in path.parents and public_root() not in path.parents
    for split in ("train", "dev"):
        path = split_path(task, split)
        assert public_root() in path.parents and hidden_root() not in path.parents
    # loading again gives the same data and fingerprints
    again = prepare_data(task, task_dir(task.name))
    assert again.fingerprints == data.fingerprints
    assert again.splits["test"] == data.splits["test"]


def test_tampered_split_is_refused(fresh_home):
    task = load_task("arith-tiny")
    prepare_data(task, task_dir(task.name))
    meta = split_path(task, "test") / "rlbench_split.json"
    info = json.loads(meta.read_text())
    info["fingerprint"] = "0" * 64
    meta.write_text(json.dumps(info))
    with pytest.raises(ConfigError, match="fingerprint"):
        prepare_data(task, task_dir(task.name))


def test_unreachable_size_fails_clearly():
    task = load_task("arith-tiny", ["data.params.max_operand=3", "data.sizes.train=500"])
    with pytest.raises(ConfigError, match="data.sizes"):
        generate_splits(task)


def test_generator_from_task_folder_file(session_tasks):
    folder = session_tasks / "arith-tiny"
    (folder / "gen.py").write_text(
        "def generate(family, rng, params):\n"
        "    a = rng.randint(0, 999)\n"
        "    return {'prompt': f'{a}*2=', 'answer': str(2 * a)}\n"
    )
    task = load_task("arith-tiny", ["data.generator=gen.py:generate"])
    splits = generate_splits(task, folder)
    assert splits["test"][0]["prompt"].endswith("*2=")


def test_bad_generator_spec():
    with pytest.raises(ConfigError, match="data.generator"):
        generate_splits(load_task("arith-tiny", ["data.generator=nosuch"]))


def test_hf_datasets_source_from_local_files(tmp_path, session_tasks, fresh_home):
    files = {}
    for split, n, off in (("train", 30, 0), ("dev", 5, 100), ("test", 10, 200), ("heldout", 10, 300)):
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps({"q": f"{i}+1=", "a": str(i + 1)}) + "\n" for i in range(off, off + n)))
        files[split] = str(path)
    overrides = ["data.source=hf", "data.hf.path=json", "data.hf.prompt_field=q", "data.hf.answer_field=a"]
    overrides += [f"data.hf.data_files.{s}={p}" for s, p in files.items()]
    task = load_task("arith-tiny", overrides)
    data = prepare_data(task, task_dir(task.name))
    assert len(data.splits["train"]) == 30 and data.splits["test"][0] == {"prompt": "200+1=", "answer": "201", "id": "test-00000"}


def test_hf_source_with_overlapping_splits_is_refused(tmp_path, fresh_home):
    path = tmp_path / "all.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(5)))
    overrides = ["data.source=hf", "data.hf.path=json"] + [f"data.hf.data_files.{s}={path}" for s in ("train", "dev", "test", "heldout")]
    with pytest.raises(ConfigError, match="share the prompt"):
        prepare_data(load_task("arith-tiny", overrides))
