import shutil

import pytest
import torch

from rlbench.config.core import ConfigError
from rlbench.models.recipe import recipe_hash
from rlbench.models.tokenizer import build_char_tokenizer
from rlbench.models.zoo import build, build_dir, load_model, load_recipe, model_meta, recipe_names, resolve_model


def test_zoo_has_two_sizes_of_one_family():
    s, m = load_recipe("arith-s"), load_recipe("arith-m")
    assert s.family == m.family == "llama"
    assert s.corpus == m.corpus and s.alphabet == m.alphabet
    assert {"arith-s", "arith-m", "arith-tiny"} <= set(recipe_names())


def test_every_recipe_has_head_size_at_least_32():
    for name in recipe_names():
        arch = load_recipe(name).arch
        assert arch.hidden_size // arch.num_heads >= 32


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


def test_unbuilt_zoo_model_without_build_is_clear(fresh_home):
    with pytest.raises(ConfigError, match="models build arith-m"):
        resolve_model("arith-m", build_missing=False)


def test_hub_id_is_tried_and_fails_clearly_offline():
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct").kind == "hub"
    with pytest.raises(ConfigError, match="hub"):
        load_model("rlbench-test/definitely-not-a-model")


def test_bad_reference_is_clear():
    with pytest.raises(ConfigError, match="neither a zoo recipe"):
        resolve_model("not a model")


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="config.json"):
        resolve_model(str(tmp_path))
