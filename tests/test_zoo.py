import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch

from rlbench.config.core import ConfigError
from rlbench.models.recipe import recipe_hash
from rlbench.models.tokenizer import build_char_tokenizer
from rlbench.models import zoo
from rlbench.models.zoo import (BuildFailed, build, build_dir, load_model, load_recipe, model_meta, pins,
                                recipe_names, resolve_model, verify_canonical)


def test_zoo_has_two_sizes_of_one_family():
    s, m = load_recipe("arith-s"), load_recipe("arith-m")
    assert s.family == m.family == "llama"
    assert s.corpus == m.corpus and s.alphabet == m.alphabet
    assert {"arith-s", "arith-m", "arith-tiny"} <= set(recipe_names())


def test_every_recipe_has_head_size_at_least_32():
    for name in recipe_names():
        arch = load_recipe(name).arch
        assert arch.hidden_size // arch.num_heads >= 32


def test_a_recipe_trains_on_exactly_the_families_it_names(tmp_path):
    """A recipe's corpus mix replaces, never joins, a default: helper-s names only `pretrain`,
    whose refusals are random, and a `main` merged in would teach it the task's hidden policy."""
    from rlbench.config.core import load_config
    from rlbench.models.recipe import ModelRecipe

    import yaml

    assert load_recipe("helper-s").corpus.mix == {"pretrain": 1.0}
    blob = yaml.safe_load((zoo.RECIPES_DIR / "arith-tiny.yaml").read_text())
    blob["corpus"].pop("mix")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(blob))
    with pytest.raises(ConfigError, match="corpus.mix"):
        load_config(ModelRecipe, tmp_path / "r.yaml")
    blob["corpus"]["mix"] = {"main": 0.0}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(blob))
    with pytest.raises(ConfigError, match="corpus.mix"):
        load_config(ModelRecipe, tmp_path / "r.yaml")


def test_head_size_16_is_refused():
    with pytest.raises(ConfigError, match="head size"):
        load_recipe("arith-tiny", ["arch.num_heads=4"])


def test_tokenizer_round_trip():
    tok = build_char_tokenizer()
    text = "12+34=46 The answer: 46!\n"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_build_reload_identical_logits_and_cache(fresh_home):
    recipe = load_recipe("arith-tiny")
    path = build(recipe)
    meta = model_meta(path)
    assert meta["recipe_hash"] == recipe_hash(recipe) and meta["parameters"] > 0
    assert meta["pretrain"]["steps"] == recipe.pretrain.max_steps
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert build(recipe) == path and (path / "model.safetensors").stat().st_mtime_ns == mtime  # cached

    model, tok, resolved = load_model("arith-tiny", build_missing=False)
    assert resolved.kind == "zoo"
    again, _, _ = load_model(str(path))
    ids = tok(["12+34=", "7+8="], return_tensors="pt", padding=True)
    with torch.no_grad():
        a = model(**ids).logits
        b = again(**ids).logits
    assert torch.equal(a, b)


def test_build_is_deterministic(fresh_home, tmp_path):
    recipe = load_recipe("arith-tiny")
    first = build(recipe)
    copy = tmp_path / "first"
    shutil.copytree(first, copy)
    build(recipe, force=True)
    a, _, _ = load_model(str(copy))
    b, _, _ = load_model(str(first))
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)


def test_override_changes_hash_and_folder():
    a = load_recipe("arith-tiny")
    b = load_recipe("arith-tiny", ["pretrain.max_steps=31"])
    assert recipe_hash(a) != recipe_hash(b) and build_dir(a) != build_dir(b)
    # the name and description do not change the weights, so not the hash either
    c = load_recipe("arith-tiny", ["description=other words"])
    assert recipe_hash(a) == recipe_hash(c)


def test_local_folder_loads_through_from_pretrained(fresh_home, tmp_path):
    path = build(load_recipe("arith-tiny"))
    local = tmp_path / "my-model"
    shutil.copytree(path, local)
    model, tok, resolved = load_model(str(local))
    assert resolved.kind == "local" and model.config.model_type == "llama"


def test_unbuilt_zoo_model_without_build_is_clear(fresh_home, tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "PINS_FILE", tmp_path / "no-pins.json")  # a recipe with no canonical artifact
    with pytest.raises(ConfigError, match="models build arith-m"):
        resolve_model("arith-m", build_missing=False)


def _hub_snapshot(cache: Path, repo: str, revision: str, source: Path) -> Path:
    """The hub cache's own layout (what snapshot_download writes): blobs, refs/main, snapshots/REV."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snap = root / "snapshots" / revision
    snap.mkdir(parents=True)
    (root / "blobs").mkdir()
    for f in source.iterdir():
        blob = root / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        blob.write_bytes(f.read_bytes())
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(revision)
    return snap


def test_a_hub_id_loads_its_snapshot_from_the_cache_by_revision_and_is_named_by_its_bytes(tmp_path):
    from rlbench.models.hub import hub_cache
    from rlbench.models.standin import build_chat_standin
    from rlbench.models.zoo import model_identity, weights_hash

    source = build_chat_standin(tmp_path / "built")
    rev = "0123456789abcdef0123456789abcdef01234567"
    snap = _hub_snapshot(hub_cache(), "rlbench-test/qwen2-standin", rev, source)
    for ref in ("rlbench-test/qwen2-standin", f"rlbench-test/qwen2-standin@{rev}"):
        resolved = resolve_model(ref)
        assert resolved.kind == "hub" and Path(resolved.location) == snap, resolved
    model, tokenizer, _ = load_model(f"rlbench-test/qwen2-standin@{rev}")
    assert type(model).__name__ == "Qwen2ForCausalLM" and tokenizer.chat_template
    assert model_identity("rlbench-test/qwen2-standin") == weights_hash(source)  # the bytes, not the name
    with pytest.raises(ConfigError, match="not in the cache .* and not fetched.*huggingface-cli download"):
        resolve_model("rlbench-test/qwen2-standin@ffffffffffffffffffffffffffffffffffffffff")
    with pytest.raises(ConfigError, match="not in the cache"):
        load_model("rlbench-test/definitely-not-a-model")


def test_bad_reference_is_clear():
    with pytest.raises(ConfigError, match="neither a zoo recipe"):
        resolve_model("not a model")


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="config.json"):
        resolve_model(str(tmp_path))


# --- canonical artifacts (issue 22): one set of base-model bytes on every machine -----------------

TASK_BASES = {"arith-s", "arith-m", "calc-s", "game-s", "words-s"}


def test_every_task_base_is_pinned_verified_and_loads_without_a_build(fresh_home):
    """A zoo name loads the shipped artifact, checked against its sha256, and never builds. A CPU
    task's base is a pinned zoo model; a real-tier task's is a hub id (named by its snapshot's
    hash in every result)."""
    import yaml

    from rlbench.models.hub import parse_hub_id

    pinned = pins()
    assert TASK_BASES | {"arith-tiny"} <= set(pinned)
    for spec in sorted((Path(zoo.__file__).parents[2] / "tasks").glob("*/task.yaml")):
        task = yaml.safe_load(spec.read_text())
        models = task["model"]
        if task["budget"].get("device") == "cuda":
            assert parse_hub_id(models["base"]) is not None, spec
            continue
        assert models["base"] in pinned and models.get("scale") in (None, *pinned), spec
    for name, p in pinned.items():
        folder = verify_canonical(name)
        assert zoo.artifact_sha256(folder) == p.sha256 and zoo.weights_hash(folder) == p.weights_hash
        assert p.recipe_hash == zoo.recipe_hash(load_recipe(name))
        assert p.bytes == sum(f.stat().st_size for f in folder.iterdir()) < 64 * 1024 * 1024
    model, _, resolved = load_model("arith-tiny", build_missing=False)
    assert resolved.location == str(zoo.canonical_dir("arith-tiny")) and model.config.model_type == "llama"
    assert not (fresh_home / "public" / "models").exists()  # nothing was built


def _private_canonical(tmp_path, monkeypatch, names=("arith-tiny",)):
    """A copy of the canonical folder the test may corrupt."""
    root = tmp_path / "canonical"
    root.mkdir()
    for name in names:
        shutil.copytree(zoo.canonical_dir(name), root / name)
    shutil.copy(zoo.PINS_FILE, root / "pins.json")
    monkeypatch.setattr(zoo, "CANONICAL_DIR", root)
    monkeypatch.setattr(zoo, "PINS_FILE", root / "pins.json")
    zoo._verified.clear()
    return root


def test_a_changed_canonical_artifact_is_an_error_naming_both_hashes(tmp_path, monkeypatch):
    root = _private_canonical(tmp_path, monkeypatch)
    pinned = pins()["arith-tiny"].sha256
    weights = root / "arith-tiny" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as exc:
        load_model("arith-tiny")
    got = zoo.artifact_sha256(root / "arith-tiny")
    assert pinned in str(exc.value) and got in str(exc.value) and got != pinned
    (root / "arith-tiny" / "model.safetensors").unlink()
    (root / "arith-tiny" / "extra.txt").write_text("x")
    with pytest.raises(ConfigError, match=pinned):
        resolve_model("arith-tiny")


def test_a_recipe_changed_after_its_pin_is_refused(tmp_path, monkeypatch):
    _private_canonical(tmp_path, monkeypatch)
    recipes = tmp_path / "recipes"
    shutil.copytree(zoo.RECIPES_DIR, recipes)
    text = (recipes / "arith-tiny.yaml").read_text().replace("lr: 3e-3", "lr: 2e-3")
    (recipes / "arith-tiny.yaml").write_text(text)
    monkeypatch.setattr(zoo, "RECIPES_DIR", recipes)
    with pytest.raises(ConfigError, match="changed since its canonical artifact was pinned"):
        resolve_model("arith-tiny")


def test_a_build_whose_loss_does_not_fall_fails_and_is_not_cached(fresh_home):
    recipe = load_recipe("arith-tiny", ["pretrain.lr=1e-9"])
    with pytest.raises(BuildFailed, match="loss did not fall"):
        build(recipe)
    assert not build_dir(recipe).exists() and not build_dir(recipe).with_name(build_dir(recipe).name + ".tmp").exists()


def test_a_build_that_misses_its_calibration_target_fails(fresh_home):
    recipe = load_recipe("arith-tiny", ["pretrain.target_accuracy=1.0"])
    with pytest.raises(BuildFailed, match="never reached its calibration target 1.000"):
        build(recipe)
    assert not build_dir(recipe).exists()


def test_pinned_steps_train_exactly_that_long(fresh_home):
    recipe = load_recipe("arith-tiny", ["pretrain.steps=20", "pretrain.eval_every=15"])
    meta = model_meta(build(recipe))
    assert meta["pretrain"]["steps"] == 20 and meta["pretrain"]["stopped_by"] == "steps"
    with pytest.raises(ConfigError, match="pretrain.steps"):
        load_recipe("arith-tiny", ["pretrain.steps=31"])  # past max_steps


def test_models_build_says_whether_it_reproduced_the_pin_and_verify_checks_all(fresh_home, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from rlbench.cli import app

    root = _private_canonical(tmp_path, monkeypatch)
    res = CliRunner().invoke(app, ["models", "pin", "arith-tiny", "--quiet"])  # a build on this machine, pinned
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["models", "build", "arith-tiny", "--force", "--quiet"])
    assert res.exit_code == 0 and "reproduced the canonical arith-tiny" in res.output, res.output
    table = {**zoo.read_json(root / "pins.json")}
    table["arith-tiny"]["weights_hash"] = "0" * 16
    zoo.atomic_write_json(root / "pins.json", table)
    res = CliRunner().invoke(app, ["models", "build", "arith-tiny", "--quiet"])
    assert res.exit_code == 0 and "differs from the canonical arith-tiny" in res.output, res.output
    res = CliRunner().invoke(app, ["models", "verify", "arith-tiny"], terminal_width=200)
    assert res.exit_code == 0 and "ok" in res.output, res.output
    assert CliRunner().invoke(app, ["models", "verify", "no-such"]).exit_code == 2
    (root / "arith-tiny" / "config.json").write_text("{}")
    res = CliRunner().invoke(app, ["models", "verify", "arith-tiny"], terminal_width=200)
    assert res.exit_code == 1 and "failed" in res.output, res.output
