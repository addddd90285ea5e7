"""Learner: a DeepSpeed engine around a HF causal LM, plus a frozen reference copy for KL.

On CPU it runs DeepSpeed in one process (`DS_ACCELERATOR=cpu`, gloo, RANK 0 of WORLD_SIZE 1;
without those variables DeepSpeed falls back to MPI discovery and fails for want of mpi4py, as
measured). ZeRO stage 0, 1 or 2 comes from config. The pipeline supplies the loss; the learner
computes token logprobs, steps, exports weights for the rollout engine and saves HF checkpoints.
"""

from __future__ import annotations

import copy
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from rlbench.config.core import check
from rlbench.engines.group_rows import shared_prefix_logprobs
from rlbench.engines.kernel_choice import choose_kernels


@dataclass
class LearnerConfig:
    zero_stage: int = 0
    lr: float = 3e-4
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    reference_model: bool = True  # keep a frozen copy for KL
    precision: str = "fp32"  # fp32 | bf16 | auto (rule) | measure (timed: rlbench/engines/kernel_choice.py)
    attention: str = "auto"  # auto (rule) | measure | eager | sdpa

    def validate(self) -> None:
        from rlbench.engines.precision import ATTENTION, PRECISIONS

        check(self.zero_stage in (0, 1, 2), "learner.zero_stage", self.zero_stage, "0, 1 or 2")
        check(self.lr > 0, "learner.lr", self.lr, "> 0")
        check(self.precision in PRECISIONS, "learner.precision", self.precision, ", ".join(PRECISIONS))
        check(self.attention in ATTENTION, "learner.attention", self.attention, ", ".join(ATTENTION))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _single_process_env() -> None:
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_SIZE", "1")):
        os.environ.setdefault(key, value)


def token_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """log p(token_t | tokens_<t) for t = 1..T-1: shape [B, T-1], aligned with input_ids[:, 1:]."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def token_entropy(model_logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(model_logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def deepspeed_engine(module: torch.nn.Module, cfg: LearnerConfig, dtype: torch.dtype = torch.float32) -> Any:
    """A DeepSpeed engine over `module` with a torch AdamW client optimizer (the one measured to
    work on CPU), ZeRO stage from config. bf16: DeepSpeed keeps fp32 master weights and steps them,
    the module computes in bf16. Also used for extra trainable modules (a PPO critic)."""
    import deepspeed

    _single_process_env()
    if not deepspeed.comm.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo", verbose=False)
    opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=cfg.weight_decay, betas=(cfg.beta1, cfg.beta2))
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
    }
    if dtype == torch.bfloat16:
        ds_config["bf16"] = {"enabled": True}
    engine, _, _, _ = deepspeed.initialize(model=module, optimizer=opt, config=ds_config)
    return engine


class Learner:
    def __init__(self, model: str, cfg: LearnerConfig | None = None, device: str | None = None,
                 num_threads: int | None = None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if num_threads:
            torch.set_num_threads(num_threads)
        self.cfg = cfg or LearnerConfig()
        self.cfg.validate()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        # `measure`: timed on this machine (rlbench/engines/kernel_choice.py); the rest by rule
        self.kernels = choose_kernels(model, self.cfg.precision, self.cfg.attention, self.device)
        self.dtype, self.attention = self.kernels.dtype, self.kernels.attention
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, attn_implementation=self.attention)
        self.ref = None
        if self.cfg.reference_model:
            self.ref = copy.deepcopy(net).to(self.device, self.dtype).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.engine = deepspeed_engine(net, self.cfg, self.dtype)
        self.steps = 0

    @property
    def module(self) -> Any:
        return self.engine.module

    def logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, reference: bool = False) -> torch.Tensor:
        model = self.ref if reference else self.engine
        if model is None:
            raise RuntimeError("this learner keeps no reference model (learner.reference_model=false)")
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        if reference or not self.engine.training:
            with torch.no_grad():
                return token_logprobs(model, input_ids, attention_mask)
        return token_logprobs(model, input_ids, attention_mask)

    def shared_logprobs(self, batch: Any, reference: bool = False) -> torch.Tensor:
        """`shared_prefix_logprobs` on a batch with prompt_ids, prompt_attention, completion_ids,
        completion_attention and group (reference_pipelines.common.GroupBatch)."""
        model = self.ref if reference else self.engine
        if model is None:
            raise RuntimeError("this learner keeps no reference model (learner.reference_model=false)")
        args = [t.to(self.device) for t in (batch.prompt_ids, batch.prompt_attention, batch.completion_ids,
                                             batch.completion_attention)]
        if reference or not self.engine.training:
            with torch.no_grad():
                return shared_prefix_logprobs(model, *args, batch.group)
        return shared_prefix_logprobs(model, *args, batch.group)

    def train_step(self, loss_fn: Callable[["Learner"], tuple[torch.Tensor, dict[str, float]]]) -> dict[str, float]:
        """One optimizer step on the loss `loss_fn(self)` returns (with its stats)."""
        self.engine.train()
        loss, stats = loss_fn(self)
        self.engine.backward(loss)
        self.engine.step()
        self.steps += 1
        return {"loss": float(loss.detach()), **stats}

    def set_lr(self, lr: float) -> None:
        """The learning rate of the next steps (a schedule's); every wrapper DeepSpeed puts around
        the client optimizer shares its param groups."""
        for group in self.engine.optimizer.param_groups:
            group["lr"] = lr

    def export_weights(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the policy weights as the learner computes with them (bf16 or fp32), for
        the rollout engine (object store or in-process)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}

    def master_state_dict(self) -> dict[str, torch.Tensor]:
        """The fp32 weights the optimizer steps: in bf16 mode these are DeepSpeed's master copies,
        not the rounded bf16 ones, so a saved checkpoint loses nothing to the training precision."""
        from deepspeed.utils import safe_get_full_fp32_param

        opt = getattr(self.engine, "optimizer", None)
        masters: dict[int, torch.Tensor] = {}
        # ZeRO 0 + bf16 wraps the client optimizer in FP16_UnfusedOptimizer, parallel groups of
        # low-precision params and their fp32 copies; ZeRO 1/2 expose safe_get_full_fp32_param
        for lp_group, hp_group in zip(getattr(opt, "fp16_groups", []), getattr(opt, "fp32_groups", [])):
            for lp, hp in zip(lp_group, hp_group):
                masters[id(lp)] = hp
        out: dict[str, torch.Tensor] = {}
        for name, tensor in self.module.state_dict(keep_vars=True).items():
            full = None
            if isinstance(tensor, torch.nn.Parameter) and tensor.dtype != torch.float32:  # tied weights share one Parameter
                full = masters.get(id(tensor))
                if full is None:
                    full = safe_get_full_fp32_param(tensor)
                if full is None:
                    raise RuntimeError(f"no fp32 master copy found for '{name}' (DeepSpeed optimizer {type(opt).__name__})")
            out[name] = (full if full is not None else tensor).detach().to("cpu", torch.float32, copy=True)
        return out

    def save(self, path: str | Path) -> Path:
        """An fp32 HF checkpoint (`from_pretrained` loads it) whatever the training precision."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = self.master_state_dict()
        config = copy.deepcopy(self.module.config)
        config.dtype = torch.float32
        self.module.save_pretrained(path, state_dict=state)
        config.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path
