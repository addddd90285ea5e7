"""The pipelines' losses on cases small enough to compute by hand."""

import math

import torch

from reference_pipelines.common import build_sequences
from reference_pipelines.dpo.loss import dpo_loss, sequence_logprob
from reference_pipelines.grpo.loss import group_advantages, grpo_loss, kl_k3
from reference_pipelines.ppo.loss import gae, ppo_policy_loss, ppo_value_loss, whiten
from reference_pipelines.sft.loss import sft_loss


def test_group_advantages_mean_only():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    adv = group_advantages(r, group_size=3, normalize_std=False)
    assert torch.allclose(adv, torch.tensor([2 / 3, -1 / 3, -1 / 3, -2 / 3, 1 / 3, 1 / 3]))


def test_group_advantages_std_normalized():
    r = torch.tensor([1.0, 0.0, 1.0, 0.0])
    adv = group_advantages(r, group_size=2, normalize_std=True)
    # each group: mean 0.5, population std 0.5 -> +-1
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-4)


def test_all_equal_group_gets_zero_advantage():
    adv = group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), group_size=2)
    assert torch.equal(adv, torch.zeros(4))


def test_kl_k3_sign_and_zero():
    p = torch.tensor([-1.0, -2.0])
    assert torch.equal(kl_k3(p, p), torch.zeros(2))
    assert (kl_k3(p, p + 0.5) > 0).all() and (kl_k3(p, p - 0.5) > 0).all()
    # hand value: d = 0.5 -> e^0.5 - 0.5 - 1
    assert math.isclose(float(kl_k3(torch.tensor([0.0]), torch.tensor([0.5]))), math.exp(0.5) - 1.5, rel_tol=1e-6)


def test_grpo_loss_masks_prompt_and_padding():
    logp = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 0.0]])
    loss, _ = grpo_loss(logp, logp.detach(), None, torch.tensor([2.0]), mask)
    loss.backward()
    # ratio 1 -> loss = -A on the one completion token; only that token has a gradient
    assert math.isclose(float(loss), -2.0)
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -2.0, 0.0]]))


def test_grpo_loss_clips_ratio():
    old = torch.tensor([[0.0]])
    mask = torch.ones(1, 1)
    # ratio e^1 > 1.2 with positive advantage: clipped objective 1.2 * A, no gradient
    logp = torch.tensor([[1.0]], requires_grad=True)
    loss, stats = grpo_loss(logp, old, None, torch.tensor([1.0]), mask, clip_eps=0.2)
    loss.backward()
    assert math.isclose(float(loss), -1.2, rel_tol=1e-6) and float(logp.grad) == 0.0
    assert stats["clip_frac"] == 1.0
    # same ratio with negative advantage: the unclipped term is the minimum, gradient flows
    logp2 = torch.tensor([[1.0]], requires_grad=True)
    loss2, _ = grpo_loss(logp2, old, None, torch.tensor([-1.0]), mask, clip_eps=0.2)
    loss2.backward()
    assert math.isclose(float(loss2), math.e, rel_tol=1e-6) and float(logp2.grad) > 0


def test_grpo_kl_term_pulls_towards_reference():
    logp = torch.tensor([[-0.5]], requires_grad=True)
    ref = torch.tensor([[-1.0]])
    loss, stats = grpo_loss(logp, logp.detach(), ref, torch.tensor([0.0]), torch.ones(1, 1), kl_coef=1.0)
    loss.backward()
    assert stats["kl"] > 0 and float(logp.grad) > 0  # descending lowers logp towards the reference


def test_grpo_sequence_normalisation():
    # two sequences, lengths 1 and 2, advantages 1 and 1: each sequence mean is -1, batch mean -1
    logp = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    loss, _ = grpo_loss(logp, logp, None, torch.tensor([1.0, 1.0]), mask)
    assert math.isclose(float(loss), -1.0)


def test_gae_hand_computed():
    # one sequence, completion at positions 1 and 2, reward 1 at the end, values 0.5 and 0.25
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[9.0, 0.5, 0.25]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    d2 = 1.0 - 0.25
    d1 = 0.0 + 0.25 - 0.5
    assert torch.allclose(adv, torch.tensor([[0.0, d1 + 0.5 * d2, d2]]))
    assert torch.allclose(ret[:, 1:], adv[:, 1:] + values[:, 1:])


def test_whiten_zero_mean_unit_var_on_mask():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = whiten(x, mask)
    assert abs(float((w * mask).sum())) < 1e-5 and float(w[0, 3]) == 0.0


def test_ppo_losses_clip():
    old = torch.zeros(1, 1)
    logp = torch.tensor([[1.0]])
    loss, frac = ppo_policy_loss(logp, old, torch.tensor([[1.0]]), torch.ones(1, 1), 0.2)
    assert math.isclose(float(loss), -1.2, rel_tol=1e-6) and frac == 1.0
    v = ppo_value_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.ones(1, 1), 0.2)
    # clipped value 0.2 -> max((0)^2, (0.8)^2) / 2
    assert math.isclose(float(v), 0.32, rel_tol=1e-6)


def test_dpo_loss_hand_computed():
    z = torch.zeros(1)
    loss, stats = dpo_loss(z, z, z, z, beta=0.1)
    assert math.isclose(float(loss), math.log(2), rel_tol=1e-6)
    loss2, stats2 = dpo_loss(torch.tensor([1.0]), torch.tensor([-1.0]), z, z, beta=0.5)
    assert math.isclose(float(loss2), -math.log(1 / (1 + math.exp(-1.0))), rel_tol=1e-6)
    assert stats2["pref_acc"] == 1.0
    assert float(sequence_logprob(torch.tensor([[-1.0, -2.0, -4.0]]), torch.tensor([[0.0, 1.0, 1.0]]))) == -6.0


def test_sft_loss_on_answer_tokens_only():
    logp = torch.tensor([[-5.0, -1.0, -3.0]])
    assert float(sft_loss(logp, torch.tensor([[0.0, 1.0, 1.0]]))) == 2.0


def test_build_sequences_masks_completion_and_eos():
    from rlbench.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    c1 = tok("46", add_special_tokens=False)["input_ids"]
    c2 = tok("1234", add_special_tokens=False)["input_ids"]
    seq = build_sequences(tok, ["1+2=", "12+34="], [c1, c2], max_new_tokens=4)
    # row 0: <bos>1+2= (5) + 4 6 <eos>; completion tokens predicted at positions 4..6
    assert seq.mask[0].tolist()[:7] == [0, 0, 0, 0, 1, 1, 1]
    assert int(seq.input_ids[0, 7]) == tok.eos_token_id
    # row 1 hit max_new_tokens: no EOS appended, 4 completion tokens
    assert int(seq.mask[1].sum()) == 4 and tok.eos_token_id not in seq.input_ids[1].tolist()
    assert seq.attention_mask[0].sum() == 8 and seq.mask.shape[1] == seq.input_ids.shape[1] - 1
