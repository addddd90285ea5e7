"""rlbench: can an LLM agent build an RL post-training pipeline that really improves a base model?"""

__version__ = "0.1.0"
