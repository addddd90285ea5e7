"""LoRA adapter submissions: the grader merges a PEFT LoRA adapter onto its own copy of the task's
base (never the base the adapter names) and checks and scores the merged model like any full
checkpoint; an adapter that is not LoRA, has no safetensors, or does not fit the base is refused
with its reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import TINY_TASK as TINY


def _adapter(base: Path, out: Path, scale: float = 0.05, **lora) -> Path:
    """A LoRA adapter of `base` with nonzero B (so merging changes the weights), saved by peft."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], **lora))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, scale)
    peft_model.save_pretrained(str(out), safe_serialization=True)
    return out


def _merged_reference(base: Path, adapter: Path) -> dict[str, torch.Tensor]:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    return {k: v.clone() for k, v in PeftModel.from_pretrained(model, str(adapter)).merge_and_unload().state_dict().items()}


@pytest.fixture
def base() -> Path:
    from rlbench.models.zoo import resolve_model

    return Path(resolve_model(TINY).location)


def test_a_lora_adapter_is_merged_onto_the_harness_base_and_checked_as_a_full_model(tmp_path, base):
    from transformers import AutoModelForCausalLM

    from rlbench.grading.validate import ADAPTER_DIR, validate_checkpoint

    ws = tmp_path / "ws"
    adapter = _adapter(base, ws / "ckpt")
    want = _merged_reference(base, adapter)
    # the adapter's own word on its base is the agent's text: a host path here is never opened
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "/etc"
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    v = validate_checkpoint(adapter, ws, base, tmp_path / "copy", max_bytes=10 ** 8)
    assert v.ok, v.reason
    copy = Path(v.path)
    assert (copy / "config.json").is_file() and (copy / ADAPTER_DIR / "adapter_model.safetensors").is_file()
    got = AutoModelForCausalLM.from_pretrained(copy, dtype=torch.float32).state_dict()
    assert set(got) == set(want)
    assert all(torch.allclose(got[k], want[k], atol=1e-6) for k in want)
    base_sd = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).state_dict()
    assert any(not torch.equal(got[k], base_sd[k]) for k in base_sd)  # the adapter changed the weights
    assert json.loads((copy / ADAPTER_DIR / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)


def test_adapters_that_cannot_be_merged_are_refused_with_the_reason(tmp_path, base):
    from rlbench.grading.validate import validate_checkpoint

    ws = tmp_path / "ws"
    good = _adapter(base, tmp_path / "good")

    def case(name: str, change) -> str:
        folder = ws / name
        shutil.copytree(good, folder)
        change(folder)
        v = validate_checkpoint(folder, ws, base, tmp_path / "copies" / name, max_bytes=10 ** 8)
        assert not v.ok and not (tmp_path / "copies" / name).exists()
        return v.reason

    def edit(folder: Path, **changes) -> None:
        cfg = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**cfg, **changes}))

    assert "peft_type must be LORA" in case("ia3", lambda f: edit(f, peft_type="IA3"))
    assert "adapter_model.safetensors" in case("bin", lambda f: (f / "adapter_model.safetensors").unlink())
    assert "does not merge" in case("nowhere", lambda f: edit(f, target_modules=["no_such_proj"]))
    assert "adapter_config.json does not load" in case("garbled", lambda f: (f / "adapter_config.json").write_text("{"))
    assert "may not hold a 'adapter' entry" in case("collide", lambda f: (f / "adapter").mkdir())
    # an adapter made for another architecture: its tensors do not fit this base's shapes
    from safetensors.torch import load_file, save_file

    def wrong_shapes(f: Path) -> None:
        tensors = load_file(f / "adapter_model.safetensors")
        save_file({k: torch.zeros(v.shape[0] + 3, v.shape[1]) for k, v in tensors.items()}, f / "adapter_model.safetensors")

    assert "does not merge" in case("shapes", wrong_shapes)
