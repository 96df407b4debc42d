"""Names of the loss-aggregation modes of the GRPO core (torch-free, so configs validate without torch)."""

from __future__ import annotations

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
LOSS_AGG_ALIASES = {
    "bnpo": "token-mean",
    "grpo": "seq-mean-token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dr-grpo": "seq-mean-token-sum-norm",
}


def resolve_loss_agg(mode: str) -> str:
    """Canonical loss-aggregation name for ``mode`` (a canonical name or an alias).

    Canonical names are verl's ``loss_agg_mode`` values; aliases are TRL's ``loss_type`` values.
    Raises ValueError listing valid modes and aliases.
    """
    if mode in LOSS_AGG_MODES:
        return mode
    if mode in LOSS_AGG_ALIASES:
        return LOSS_AGG_ALIASES[mode]
    raise ValueError(
        f"unknown loss aggregation {mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}; "
        f"aliases: {', '.join(f'{k}={v}' for k, v in LOSS_AGG_ALIASES.items())}"
    )
