"""The errors of bad input: :class:`ConfigError` (one line naming the field and the fix) and :class:`MachineError` (what
this machine lacks), and how ``corl-bench validate --elsewhere`` turns the latter into warnings. Re-exported by
:mod:`corl_bench.config`."""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any


class ConfigError(ValueError):
    """A configuration problem; ``str(e)`` is one line naming the field and the fix."""


class MachineError(ConfigError):
    """What the config needs and this machine lacks (a CUDA device, a local data copy with the hub unreachable, a
    model that is neither cached nor downloadable). ``run`` and ``validate`` refuse it; ``validate --elsewhere``
    (checking a config for another machine) reports it as a warning instead (:func:`machine_problem`)."""


_ELSEWHERE = contextvars.ContextVar("corl_bench_elsewhere", default=False)


@contextlib.contextmanager
def checking_for_elsewhere() -> Any:
    """Within this block, :func:`machine_problem` warns instead of raising (``corl-bench validate --elsewhere``)."""
    token = _ELSEWHERE.set(True)
    try:
        yield
    finally:
        _ELSEWHERE.reset(token)


def machine_problem(message: str) -> None:
    """Raise :class:`MachineError` (one line), or log it as a warning while checking a config for another machine."""
    if _ELSEWHERE.get():
        logging.getLogger("corl_bench").warning("on this machine: %s", message)
        return
    raise MachineError(message)
