"""Training: agents, the controller's step (trainer), one run end to end (runner), the GRPO core, checkpoints,
diagnostics, sweeps and the run's progress display. Imports nothing from :mod:`corl_bench.report`."""
