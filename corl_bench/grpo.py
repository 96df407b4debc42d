"""Deprecated alias of :mod:`corl_bench.train.grpo` (moved in 0.2; kept for one release)."""

import warnings

from corl_bench.train.grpo import *  # noqa: F401,F403

warnings.warn("corl_bench.grpo moved to corl_bench.train.grpo", DeprecationWarning, stacklevel=2)
