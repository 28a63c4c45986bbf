"""rlrun: a declarative experiment runner for LLM RL post-training."""

__version__ = "0.1.0"
