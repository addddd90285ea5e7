"""Reference RL pipelines on rlbench's engines: GRPO, PPO, DPO, SFT.

Each algorithm is one folder whose `loss.py` is readable in one screen and whose `train.py` is the
loop. What every loop shares (config, data, sequences, logging, checkpoints, weight sync) is in
`common.py`, so the loops differ only where the algorithms do.
"""

PIPELINES = {
    "grpo": "reference_pipelines.grpo.train",
    "ppo": "reference_pipelines.ppo.train",
    "dpo": "reference_pipelines.dpo.train",
    "sft": "reference_pipelines.sft.train",
}
