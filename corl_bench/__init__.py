"""corl_bench: benchmark harness for label-free RL of LLMs with GRPO."""
__version__ = "0.1.0"
