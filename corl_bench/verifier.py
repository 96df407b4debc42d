"""Deprecated alias of :mod:`corl_bench.eval.verifier` (moved in 0.2; kept for one release). Methods import what
they need from the method contract, :mod:`corl_bench.method`."""

import warnings

from corl_bench.eval.verifier import *  # noqa: F401,F403
from corl_bench.eval.verifier import __all__  # noqa: F401

warnings.warn("corl_bench.verifier moved to corl_bench.eval.verifier (methods: import from corl_bench.method)",
              DeprecationWarning, stacklevel=2)
