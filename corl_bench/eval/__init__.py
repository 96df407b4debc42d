"""Evaluation: the verifier (extraction, equivalence, voting), benchmark specs and data, items and prompts, the one
evaluator (in-run and ``corl-bench eval``), metrics, the code sandbox and the lm-eval bridge."""
