"""How long the prompts of a run are, in each agent's tokens: the input the memory estimate needs besides the
architecture (:mod:`corl_bench.hf.fit`).

A training micro-batch is padded to its longest row (prompt + completion), so a step's activations follow the longest
prompt it holds, and a run's peak follows the longest prompt it ever draws. :func:`longest_prompts` replays the
run's training stream (the seed's epoch order, ``data.train_pool``) for the ``run.steps x rollout.prompts_per_step``
problems it draws, renders the longest of them as each agent is asked (its chat template, prompt format and view)
and counts their tokens. A run of a few steps is planned for the prompts it draws; a run that passes through the
whole training set, for the set's longest prompt.

What it cannot see: the contamination check (which drops training problems that equal a benchmark item, before the
first draw, and so reorders the stream) and a rephrased view (measured on the original text). Where the model's
tokenizer is not on the machine yet (a model entry is dequantised on its first run, after validation), the length is
approximated from the rendered text without its chat template (:data:`CHARS_PER_TOKEN`, :data:`TEMPLATE_TOKENS`);
where the data cannot be read, it is ``None`` and the estimate assumes :data:`~corl_bench.hf.fit.PROMPT_TOKENS`.
"""

from __future__ import annotations

import logging
from itertools import islice
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["LONGEST", "longest_prompts"]

LONGEST = 32
"""problems rendered and tokenized per agent: the longest of the draws by characters (tokens follow characters
closely enough that the longest prompt in tokens is among them)"""
CHARS_PER_TOKEN = 3.0
"""characters per token of the approximation: fewer than English prose (about 4) because math text and numbers split
finer, so the approximation errs long (GSM8K's longest prompt for Qwen2.5: 215 tokens measured, 300 approximated)"""
TEMPLATE_TOKENS = 40
"""tokens a chat template adds around the user's turn in the approximation (Qwen2.5's default system turn and the
role markers: 30)"""
_memo: dict[tuple, list[tuple[int | None, str]]] = {}


def _drawn(cfg: Any) -> list[Any] | None:
    """The training problems the run draws (module docstring), or None when the set cannot be read here."""
    from corl_bench.hf.data import TrainingSet

    try:
        problems = TrainingSet.load(cfg.data.train, cfg.data.data_dir or None)
    except Exception as e:  # noqa: BLE001 - no data here: the estimate falls back (validate --elsewhere)
        log.debug("prompt lengths: training set %s not readable here (%s)", cfg.data.train, e)
        return None
    from corl_bench.profile import pooled

    size = len(problems.problems)
    pool = min(cfg.data.train_pool, size)  # a pool larger than the set is the run's own error to report
    draws = min(max(1, cfg.run.steps) * cfg.rollout.prompts_per_step, pool or size)
    return list(islice(pooled(problems.epochs(cfg.run.seed), cfg.run.seed, pool), draws))


def _tokenizer_here(profile: Any, family: str) -> Any | None:
    """The agent's tokenizer when it can be read without downloading or converting anything, else None."""
    from corl_bench.models.entries import ENTRIES, entry_dir
    from corl_bench.models.load import load_tokenizer

    if family in ENTRIES:
        folder = entry_dir(family, profile.cache_root)
    elif Path(family).is_dir():
        folder = Path(family)
    else:
        return None  # a hub id (maybe not cached) or a micro family
    if not (folder / "config.json").is_file():
        return None
    try:
        return load_tokenizer(folder, profile.model_cfg.trust_remote_code)
    except Exception as e:  # noqa: BLE001 - an unreadable folder: the estimate falls back
        log.debug("prompt lengths: no tokenizer for %s (%s)", family, e)
        return None


def longest_prompts(cfg: Any, profile: Any, detail: bool = False) -> list[Any]:
    """Per agent of ``cfg.cohort``, asked through ``profile`` (an :class:`~corl_bench.hf.profile.HFProfile`): the
    most tokens any prompt the run draws takes as that agent is asked (images not counted: the estimate adds an
    image's tokens; special tokens counted as the engines encode them); None where the data cannot be read here. ``detail``: (tokens, how) pairs, how = ``measured`` / ``approximate`` / ``unknown``."""
    a_key = tuple((a.family, a.prompt, a.view) for a in cfg.cohort.agents)
    key = (cfg.data.train, cfg.data.data_dir, cfg.data.train_pool, cfg.run.seed, cfg.run.steps,
           cfg.rollout.prompts_per_step, cfg.model.cache_dir, a_key)
    if key not in _memo:
        _memo[key] = _measure(cfg, profile)
    return list(_memo[key]) if detail else [n for n, _ in _memo[key]]


def _measure(cfg: Any, profile: Any) -> list[tuple[int | None, str]]:
    import math

    drawn = _drawn(cfg)
    out: list[tuple[int | None, str]] = []
    for agent in cfg.cohort.agents:
        if not drawn:
            out.append((None, "unknown"))
            continue
        view = "original" if agent.view == "rephrased" else agent.view
        longest = sorted(drawn, key=lambda p: len(p.text(view)), reverse=True)[:LONGEST]
        tok = _tokenizer_here(profile, agent.family)
        if tok is None:
            chars = max(len(profile.render(p, view, prompt=agent.prompt).text) for p in longest)
            out.append((math.ceil(chars / CHARS_PER_TOKEN) + TEMPLATE_TOKENS, "approximate"))
            continue
        profile._tokenizers[agent.family] = tok
        texts = [profile.render(p, view, model=agent.family, prompt=agent.prompt).text for p in longest]
        out.append((max(len(ids) for ids in tok(texts, add_special_tokens=True)["input_ids"]), "measured"))
    return out
