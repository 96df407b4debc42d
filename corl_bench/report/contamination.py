"""``corl-bench probe contamination``: can a model recite a benchmark's problems? After Wu et al., "Reasoning or
Memorization: Unreliable Results of Reinforcement Learning due to Data Contamination" (arXiv 2507.10532), where
Qwen2.5 completes a large share of MATH-500 problems word for word from a partial prompt while clean benchmarks
read about zero.

Protocol, per model, benchmark and problem (the first ``max_problems`` of the benchmark's own loader):

* the problem's text (an item's ``problem``; a generated suite's item: its own prompt in the original wording) is
  cut by :func:`split_prefix` at 40 / 60 / 80 % of its characters (``fractions``);
* the model greedily continues the **raw prefix** (plain text, no chat template: a completion test) for
  ``min(cap, tokens(rest) + slack)`` new tokens (``slack`` 8, ``cap`` 256), ``batch`` prefixes at a time through
  the project's ``fast`` engine (:func:`engine_completer`: each row decoded to the batch's largest budget, then cut
  to its own; greedy is a prefix property, so the cut equals a run at that budget), remainders of similar length
  batched together;
* each row records :func:`exact_completion` (the remainder reproduced exactly, whitespace-normalised) and
  :func:`rouge_l` (ROUGE-L F1 over whitespace tokens of the completion, clipped to the remainder's word count, so the
  slack tokens do not count against it);
* answered correctly (at the flag fraction, 80 %, math-graded benchmarks only): the completion's answer
  (:func:`corl_bench.grading.verifier.extract_normalized`: last ``\\boxed{}``, "the answer is", else the last
  number) equals the gold answer (:func:`corl_bench.grading.verifier.is_correct`); no extractable answer is not
  correct. Simple by design: the completion is short, and a number the remainder itself holds can match by chance,
  so read it beside the exact rate, never alone.

Rows go to ``<out>/<model>/<benchmark>.jsonl`` (id, fraction, prefix_chars, rest, completion, exact, rouge_l,
max_new_tokens, answer, answered_correct); a re-run with the same ``--out`` generates only the missing
(problem, fraction) rows and never loads a model whose rows are complete. :func:`aggregate` gives, per (model,
benchmark, fraction), n, the exact-match rate and the answered-correct rate with Wilson 95 % intervals and the mean
ROUGE-L, over the rows whose remainder has at least ``min_rest_words`` (2) words: a one-word remainder is a guess of
one token, not recall (the generated arithmetic's 80 % cut of "What is 1 + 1?" leaves " 1?", and a 0.5B model
"completed" 2 of 40 such remainders by guessing the digit); those rows are stored and counted as ``short``.
**Flag rule**: a (model, benchmark) ``recites`` when its exact-match rate at the 80 % prefix is at least
``threshold`` (default 0.10): a clean benchmark reads about 0 % there, the paper's contaminated pair far above; ``no``
below it; where every 80 % remainder is short, the largest shorter prefix with scored rows decides
(:func:`flag_stats`, named in the summary); ``unmeasured`` when 0.8 was not probed. ``contamination.json`` and
``contamination.md`` are written atomically; ``corl-bench table`` marks a recited benchmark's columns with ``‡``
(:func:`mark_table`).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from corl_bench.config import ConfigError
from corl_bench.results import append_jsonl, atomic_write_text, now_iso, write_json

if TYPE_CHECKING:
    from corl_bench.report.cells import PaperTable
    from corl_bench.report.probe import ProbeModel

log = logging.getLogger(__name__)

REPORT, REPORT_MD, IDENTITY = "contamination.json", "contamination.md", "model.json"
RECITES, NO, UNMEASURED = "recites", "no", "unmeasured"
PAPER = "arXiv 2507.10532"
Complete = Callable[[Sequence[tuple[str, str]]], list[str]]
"""``[(prefix, rest), ...] -> [completion, ...]``: greedy continuation of each ``prefix`` (one batch);
``rest`` only sets that row's token budget."""


@dataclass(frozen=True)
class ContaminationSettings:
    """What the probe runs: benchmarks, prefix fractions (each in (0, 1)), the first ``max_problems`` (None = all),
    the flag ``threshold`` on the exact rate at ``flag_fraction``, the token budget ``min(cap, rest + slack)``, and
    ``batch`` prefixes per generation batch (rows are stored after each batch)."""

    benchmarks: tuple[str, ...] = ("gsm8k", "math500")
    fractions: tuple[float, ...] = (0.4, 0.6, 0.8)
    max_problems: Optional[int] = None
    threshold: float = 0.10
    flag_fraction: float = 0.8
    slack_tokens: int = 8
    max_new_tokens_cap: int = 256
    data_dir: Optional[str] = None
    batch: int = 32
    min_rest_words: int = 2
    """a row whose remainder has fewer whitespace words is stored but not scored: a one-word remainder (the
    generated arithmetic's 80 % cut leaves "1?") is a guess of one token, not evidence of recall"""


# ---------------------------------------------------------------------------------------------- pure scoring
def split_prefix(text: str, fraction: float) -> tuple[str, str]:
    """``(prefix, rest)`` of ``text.strip()`` cut at the start of the last whitespace run that begins at or before
    character ``floor(fraction * len)``: ``prefix + rest`` is the stripped text, the prefix ends in a word (no
    trailing space) and the rest starts with the whitespace. No such boundary (one long word): ``("", text)``."""
    text = text.strip()
    limit = math.floor(fraction * len(text))
    cut = next((i for i in range(min(limit, len(text) - 1), 0, -1) if text[i].isspace()), 0)
    while cut > 0 and text[cut - 1].isspace():
        cut -= 1
    return text[:cut], text[cut:]


def _norm(text: str) -> str:
    return " ".join(text.split())


def exact_completion(completion: str, rest: str) -> bool:
    """True when the whitespace-normalised completion starts with the whitespace-normalised ``rest`` (the model
    reproduced the remainder exactly; what follows it is ignored, so a remainder ending in "5" counts as reproduced
    by "50"). An empty remainder is never reproduced."""
    want = _norm(rest)
    return bool(want) and _norm(completion).startswith(want)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists (O(len a * len b) time, O(len b) memory)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 over whitespace tokens: ``2PR / (P + R)``, P = LCS / candidate tokens, R = LCS / reference tokens;
    0.0 when either is empty or nothing is shared."""
    cand, ref = candidate.split(), reference.split()
    lcs = lcs_length(cand, ref) if cand and ref else 0
    if not lcs:
        return 0.0
    p, r = lcs / len(cand), lcs / len(ref)
    return 2 * p * r / (p + r)


def wilson(k: int, n: int, z: float = 1.959964) -> Optional[tuple[float, float]]:
    """Wilson score interval (95 % by default) of ``k`` successes in ``n`` trials; None when ``n == 0``. (The same
    formula as ``scripts/real_base.py::wilson``, which a library module cannot import.)"""
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def score_row(item_id: str, fraction: float, prefix: str, rest: str, completion: str, *, gold: Optional[str],
              max_new_tokens: int) -> dict[str, Any]:
    """One stored row; ``gold`` None = the answered-correct measure is not taken (``answer`` and
    ``answered_correct`` None)."""
    from corl_bench.grading.verifier import extract_normalized, is_correct

    answer = extract_normalized(completion) if gold is not None else None
    return {"id": item_id, "fraction": fraction, "prefix_chars": len(prefix), "rest": rest, "completion": completion,
            "exact": exact_completion(completion, rest),
            "rouge_l": rouge_l(" ".join(completion.split()[:len(rest.split())]), rest),
            "max_new_tokens": max_new_tokens, "answer": answer,
            "answered_correct": None if gold is None else answer is not None and is_correct(answer, gold)}


def _rate(k: int, n: int) -> dict[str, Any]:
    ci = wilson(k, n)
    return {"k": k, "rate": k / n if n else None, "ci95": list(ci) if ci else None}


def aggregate(rows: Sequence[dict[str, Any]], fractions: Sequence[float], min_rest_words: int = 1
              ) -> list[dict[str, Any]]:
    """Per fraction: ``{fraction, n, short, exact: {k, rate, ci95}, rouge_l (mean; None when n = 0),
    answered_correct: {n, k, rate, ci95} or None where no row was graded}`` over the rows whose remainder has at
    least ``min_rest_words`` words (``n`` of them); ``short`` counts the rows left out."""
    out = []
    for f in fractions:
        probed = [r for r in rows if _key(r["fraction"]) == _key(f)]
        mine = [r for r in probed if len(r["rest"].split()) >= min_rest_words]
        graded = [r for r in mine if r.get("answered_correct") is not None]
        correct = {"n": len(graded), **_rate(sum(bool(r["answered_correct"]) for r in graded), len(graded))}
        out.append({"fraction": f, "n": len(mine), "short": len(probed) - len(mine),
                    "exact": _rate(sum(bool(r["exact"]) for r in mine), len(mine)),
                    "rouge_l": sum(r["rouge_l"] for r in mine) / len(mine) if mine else None,
                    "answered_correct": correct if graded else None})
    return out


def flag(stats: Sequence[dict[str, Any]], threshold: float, flag_fraction: float = 0.8) -> str:
    """:data:`RECITES` when the exact rate of :func:`flag_stats` is >= ``threshold``, :data:`NO` below it,
    :data:`UNMEASURED` when there is none."""
    at = flag_stats(stats, flag_fraction)
    if at is None:
        return UNMEASURED
    return RECITES if at["exact"]["rate"] >= threshold else NO


def flag_stats(stats: Sequence[dict[str, Any]], flag_fraction: float = 0.8) -> Optional[dict[str, Any]]:
    """The stats the flag rests on: ``flag_fraction``'s; where it was probed but every remainder there was too short
    to score (``short``, e.g. a one-word arithmetic remainder), the largest smaller fraction with scored rows; None
    when ``flag_fraction`` was not probed or nothing is scored."""
    at = measured_at(stats, flag_fraction)
    if at is not None:
        return at
    probed = next((st for st in stats if _key(st["fraction"]) == _key(flag_fraction) and st.get("short")), None)
    if probed is None:
        return None
    below = [st for st in stats if _key(st["fraction"]) < _key(flag_fraction) and st["n"]]
    return max(below, key=lambda st: st["fraction"]) if below else None


def measured_at(stats: Sequence[dict[str, Any]], fraction: float) -> Optional[dict[str, Any]]:
    """The stats of ``fraction`` (one entry of :func:`aggregate`), or None when it has no rows."""
    return next((st for st in stats if _key(st["fraction"]) == _key(fraction) and st["n"]), None)


def _key(fraction: float) -> float:
    return round(float(fraction), 4)


# ---------------------------------------------------------------------------------------------- checks
def parse_fractions(text: str) -> tuple[float, ...]:
    """"0.4,0.6,0.8" -> sorted distinct floats, each in (0, 1); ConfigError (one line) otherwise."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--fractions {text!r} is not a comma list of numbers; e.g. --fractions 0.4,0.6,0.8") \
            from None
    bad = [v for v in values if not 0 < v < 1]
    if bad or not values:
        raise ConfigError(f"--fractions: {bad[0] if bad else text!r} is not in (0, 1); e.g. --fractions 0.4,0.6,0.8")
    return tuple(sorted({_key(v) for v in values}))


def check_settings(settings: ContaminationSettings, models: Sequence[str]) -> list[Any]:
    """The benchmark specs (text benchmarks only); ConfigError (one line naming the fix) on bad settings."""
    from corl_bench.eval.specs import get_spec

    if not models:
        raise ConfigError("the contamination probe needs at least one model: corl-bench probe contamination MODEL...")
    if not settings.benchmarks:
        raise ConfigError("pass benchmarks with --benchmarks/-b, e.g. -b gsm8k,math500")
    if not 0 <= settings.threshold <= 1:
        raise ConfigError(f"--threshold must be in [0, 1] (got {settings.threshold}); the default is 0.10")
    if settings.batch < 1:
        raise ConfigError(f"--chunk (prefixes per generation batch) must be >= 1 (got {settings.batch})")
    if settings.max_problems is not None and settings.max_problems < 1:
        raise ConfigError(f"--max-problems must be >= 1 (got {settings.max_problems})")
    parse_fractions(",".join(map(str, settings.fractions)))
    specs = [get_spec(b) for b in settings.benchmarks]
    for spec in specs:
        if spec.modality != "text":
            raise ConfigError(f"{spec.name} is an image benchmark; the contamination probe completes text only")
    return specs


def problem_text(item: Any) -> str:
    """The problem's own text: ``item.problem`` when a string, else the item's ``prompt()`` (original wording)."""
    if isinstance(getattr(item, "problem", None), str):
        return item.problem
    own = getattr(item, "prompt", None)
    text = own() if callable(own) else None
    if not isinstance(text, str):
        raise ConfigError(f"{item.id}: no problem text to complete; the contamination probe takes text items")
    return text


# ---------------------------------------------------------------------------------------------- generation
def _budget(tok: Any, slack: int, cap: int) -> Callable[[str], int]:
    """``budget(rest) = min(cap, tokens(rest) + slack)``, the remainder tokenised without special tokens."""
    return lambda rest: min(cap, len(tok(rest, add_special_tokens=False)["input_ids"]) + slack)


def hf_completer(model: Any, tok: Any, *, slack: int = 8, cap: int = 256) -> tuple[Complete, Callable[[str], int]]:
    """``(complete, budget)`` over ``transformers``' ``generate``, one prefix at a time: the reference that
    :func:`engine_completer` is tested against. The prefix is tokenised as the tokenizer does by default (its special
    tokens, e.g. <bos>); greedy for ``budget(rest)`` tokens; the new tokens decoded without special tokens."""
    import torch

    budget = _budget(tok, slack, cap)

    def one(prefix: str, rest: str) -> str:
        enc = tok(prefix, return_tensors="pt")
        ids, mask = enc["input_ids"].to(model.device), enc["attention_mask"].to(model.device)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=budget(rest),
                                 pad_token_id=tok.pad_token_id)
        return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    return (lambda pairs: [one(p, r) for p, r in pairs]), budget


def engine_completer(model: Any, tok: Any, *, slack: int = 8, cap: int = 256) -> tuple[Complete, Callable[[str], int]]:
    """``(complete, budget)`` over the ``fast`` rollout engine (the one ``corl-bench eval`` decodes text with): a
    batch of raw prefixes (tokenised with the tokenizer's special tokens, as :func:`hf_completer`) decoded greedily
    to the batch's largest budget; each row's tokens are then cut to its own ``budget(rest)`` and decoded
    without special tokens. Greedy decoding is a prefix property, so the cut equals a run at that budget."""
    from corl_bench.rollout import Request, SamplingParams, make_engine

    budget = _budget(tok, slack, cap)
    engine = make_engine("fast", model, tok)

    def complete(pairs: Sequence[tuple[str, str]]) -> list[str]:
        if not pairs:
            return []
        budgets = [budget(rest) for _, rest in pairs]
        params = SamplingParams(n=1, greedy=True, max_new_tokens=max(budgets), logprobs=False)
        outs = engine.generate([Request(text=prefix) for prefix, _ in pairs], params)
        return [tok.decode(list(out[0].token_ids[:b]), skip_special_tokens=True) for out, b in zip(outs, budgets)]

    return complete, budget


def load_completer(m: ProbeModel, settings: ContaminationSettings) -> tuple[Complete, Callable[[str], int]]:
    """:func:`engine_completer` of a probe model loaded by :func:`corl_bench.models.load.load_model`."""
    from corl_bench.models.load import load_model

    model, tok = load_model(m.ref)
    return engine_completer(model, tok, slack=settings.slack_tokens, cap=settings.max_new_tokens_cap)


def _stored(path: Path) -> list[dict[str, Any]]:
    """The rows of ``path`` (none if absent); a torn last line of an interrupted run is skipped (and ended with a
    newline, so the next appended row starts a line of its own)."""
    rows = []
    if path.is_file():
        with path.open("rb+") as f:
            end = f.seek(0, 2)
            if end and f.seek(end - 1) >= 0 and f.read(1) != b"\n":
                f.write(b"\n")
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("%s: skipping an unreadable line (an interrupted write)", path)
    return rows


def _check_identity(folder: Path, m: ProbeModel, settings: ContaminationSettings) -> None:
    mine = {"label": m.label, "ref": m.ref, "slack_tokens": settings.slack_tokens,
            "max_new_tokens_cap": settings.max_new_tokens_cap}
    path = folder / IDENTITY
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if {k: old.get(k) for k in mine} != mine:
            raise ConfigError(f"{folder} holds completions of {old.get('ref')} with other settings ({old}); probe "
                              "into another --out or delete that folder")
        return
    write_json(path, mine)


def probe_contamination(models: Sequence[str], settings: ContaminationSettings, out: Path, *,
                        completer: Optional[Callable[[Any, ContaminationSettings],
                                                     tuple[Complete, Callable[[str], int]]]] = None,
                        report: Callable[[str], None] = log.info, generate: bool = True) -> dict[str, Any]:
    """Generate the missing rows of every model x benchmark (resumable), then aggregate: the dict written as
    ``contamination.json`` (settings, models, ``results``: per model x benchmark its fraction stats and flag).
    ``completer`` turns a :class:`~corl_bench.report.probe.ProbeModel` into ``(complete, budget)`` (default
    :func:`load_completer`; a test double replaces it). ``generate=False`` (``--from-predictions``): nothing is
    generated and no model loaded; a pair with rows missing is left out of ``results`` and listed in
    ``incomplete`` (model, benchmark, missing rows)."""
    from corl_bench.report.probe import probe_items, resolve_models

    completer = completer or load_completer

    specs = check_settings(settings, models)
    resolved = resolve_models(list(dict.fromkeys(models)))  # greedy: a model given twice is probed once
    items = {}
    for spec in specs:
        found = probe_items(spec, settings.data_dir)
        items[spec.name] = found[:settings.max_problems] if settings.max_problems else found
    results, incomplete = [], []
    for m in resolved:
        folder = out / m.dirname
        _check_identity(folder, m, settings)
        loaded = None
        for spec in specs:
            path = folder / f"{spec.name}.jsonl"
            have = {(str(r["id"]), _key(r["fraction"])) for r in _stored(path)}
            todo = [(it, f) for it in items[spec.name] for f in settings.fractions if (it.id, _key(f)) not in have]
            if not generate and todo:
                report(f"{m.label} / {spec.name}: {len(todo)} completions missing ({len(have)} stored in {path}); "
                       "left out of the report")
                incomplete.append({"model": m.label, "benchmark": spec.name, "missing": len(todo)})
                continue
            report(f"{m.label} / {spec.name}: {len(todo)} completions to generate ({len(have)} stored in {path})")
            cut = []
            for it, f in todo:
                prefix, rest = split_prefix(problem_text(it), f)
                if not prefix:
                    log.warning("%s: no word boundary before %g of the text; skipped", it.id, f)
                    continue
                cut.append((it, f, prefix, rest))
            cut.sort(key=lambda c: (len(c[3]), len(c[2])))  # similar budgets share a batch: little decoded past one
            for i in range(0, len(cut), settings.batch):
                loaded = loaded or completer(m, settings)
                complete, budget = loaded
                part = cut[i: i + settings.batch]
                texts = complete([(prefix, rest) for _, _, prefix, rest in part])
                append_jsonl(path, [score_row(it.id, f, prefix, rest, text, max_new_tokens=budget(rest),
                                              gold=it.gold if spec.grader == "math"
                                              and _key(f) == _key(settings.flag_fraction) else None)
                                    for (it, f, prefix, rest), text in zip(part, texts)])
            ids = {it.id for it in items[spec.name]}
            rows = list({(str(r["id"]), _key(r["fraction"])): r for r in reversed(_stored(path))
                         if str(r["id"]) in ids}.values())  # one row per (problem, fraction): the first stored
            stats = aggregate(rows, settings.fractions, settings.min_rest_words)
            used = flag_stats(stats, settings.flag_fraction)
            results.append({"model": m.label, "ref": m.ref, "benchmark": spec.name, "version": spec.version,
                            "n_problems": len(ids), "fractions": stats,
                            "flag": flag(stats, settings.threshold, settings.flag_fraction),
                            "flag_fraction": used["fraction"] if used else None})
        del loaded
    return {"created_at": now_iso(), "reference": PAPER, "settings": asdict(settings), "packages": _packages(),
            "definitions": {k: " ".join((f.__doc__ or "").split()) for k, f in
                            (("split", split_prefix), ("exact", exact_completion), ("rouge_l", rouge_l), ("flag", flag),
                             ("flag_stats", flag_stats))},
            "models": [{"label": m.label, "ref": m.ref} for m in resolved], "results": results,
            "incomplete": incomplete}


def _packages() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("corl-bench", "torch", "transformers", "math-verify"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


# ---------------------------------------------------------------------------------------------- reports
def _pct(rate: dict[str, Any] | None) -> str:
    if not rate or rate["rate"] is None:
        return "–"
    lo, hi = rate["ci95"]
    return f"{100 * rate['rate']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def markdown(data: dict[str, Any]) -> str:
    """The report as markdown: one row per model x benchmark x fraction (percents, Wilson 95 % in brackets)."""
    s = data["settings"]
    lines = [f"# Contamination probe ({PAPER})", "",
             f"Greedy completion of the first {', '.join(f'{100 * f:g} %' for f in s['fractions'])} of each "
             f"problem's text (no chat template; budget min({s['max_new_tokens_cap']}, remainder tokens + "
             f"{s['slack_tokens']})). Flag: `recites` when exact completions at {100 * s['flag_fraction']:g} % >= "
             f"{100 * s['threshold']:g} %.{_short_rule(s)}", "",
             summary_table(data),
             "| model | benchmark | prefix | n | short | exact % [95 % CI] | ROUGE-L | answered correctly % [95 % CI] "
             "| flag |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for res in data["results"]:
        for st in res["fractions"]:
            rl = "–" if st["rouge_l"] is None else f"{st['rouge_l']:.3f}"
            lines.append(f"| {res['model']} | {res['benchmark']} | {100 * st['fraction']:g} % | {st['n']} | "
                         f"{st.get('short', 0)} | "
                         f"{_pct(st['exact'])} | {rl} | {_pct(st['answered_correct'])} | {res['flag']} |")
    if data.get("incomplete"):
        lines += ["", "Left out, rows still missing (the probe without --from-predictions generates them): " + "; ".join(
            f"{x['model']} on {x['benchmark']} ({x['missing']} missing)" for x in data["incomplete"]) + "."]
    return "\n".join(lines) + "\n"


def _short_rule(s: dict[str, Any]) -> str:
    words = s.get("min_rest_words", 1)
    if words <= 1:
        return ""
    return (f" A row whose remainder has fewer than {words} words is kept but not scored (`short`: a one-word "
            "remainder is a guess, not recall); where every remainder at the flag's prefix is that short, the flag "
            "rests on the largest shorter prefix with scored rows (named in the summary).")


def summary_table(data: dict[str, Any]) -> str:
    """One row per model, one column per benchmark: exact completions from the flag's prefix (:func:`flag_stats`)
    as ``k/n (rate %)``, followed by ``at F %`` where that is not the flag fraction; **bold** where the pair is
    flagged ``recites``; ``–`` where the pair was not probed. The README's contamination table is this text (a test
    compares them)."""
    s = data["settings"]
    models = [m["label"] for m in data["models"]]
    benches = list(dict.fromkeys(r["benchmark"] for r in data["results"]))
    cell = {}
    for res in data["results"]:
        at = flag_stats(res["fractions"], s["flag_fraction"])
        if at is None:
            continue
        text = f"{at['exact']['k']}/{at['n']} ({100 * at['exact']['rate']:.0f} %)"
        if _key(at["fraction"]) != _key(s["flag_fraction"]):
            text += f" at {100 * at['fraction']:g} %"
        cell[res["model"], res["benchmark"]] = f"**{text}**" if res["flag"] == RECITES else text
    lines = [f"| exact from the {100 * s['flag_fraction']:g} % prefix | " + " | ".join(benches) + " |",
             "|---|" + "---:|" * len(benches)]
    lines += [f"| {m} | " + " | ".join(cell.get((m, b), "–") for b in benches) + " |" for m in models]
    return "\n".join(lines) + "\n"


def write_reports(data: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """``contamination.json`` and ``contamination.md`` under ``out``, each written atomically."""
    write_json(out / REPORT, data)
    atomic_write_text(out / REPORT_MD, markdown(data))
    return out / REPORT, out / REPORT_MD


def find_reports(results_dir: Path) -> list[Path]:
    """The ``contamination.json`` files ``corl-bench table`` reads: every one under ``results_dir``, and for a
    ``runs`` directory (the default ``results/runs``) also ``../contamination/contamination.json``, the probe's
    default ``--out``."""
    found = sorted(results_dir.rglob(REPORT)) if results_dir.is_dir() else []
    sibling = results_dir.parent / "contamination" / REPORT
    if results_dir.name == "runs" and sibling.is_file():
        found.append(sibling)
    return found


def recited(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Every (model, benchmark) flagged :data:`RECITES` in these reports: ``{model, benchmark, k, n, rate,
    fraction, threshold, path}``; ValueError (one line) on an unreadable report."""
    found = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            s = data["settings"]
            for res in data["results"]:
                if res["flag"] != RECITES:
                    continue
                at = flag_stats(res["fractions"], s["flag_fraction"])
                if at is None:
                    raise KeyError("flag_fraction")
                found.append({"model": res["model"], "benchmark": res["benchmark"], "k": at["exact"]["k"],
                              "n": at["n"], "rate": at["exact"]["rate"], "fraction": at["fraction"],
                              "threshold": s["threshold"], "path": str(path)})
        except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
            raise ValueError(f"{path} is not a readable contamination report ({exc.__class__.__name__}); rerun "
                             "`corl-bench probe contamination` or remove it") from None
    return found


def mark_table(table: PaperTable, pairs: Sequence[dict[str, Any]]) -> PaperTable:
    """``table`` with ``‡`` after each recited benchmark in its value-column headers (and in the tables of
    ``table.also``) and one footer line naming the (model, benchmark) pairs; unchanged when no pair names a
    benchmark of the table."""
    shown = set(table.benchmarks) | {b for t in table.also for b in t.benchmarks}
    hits = [p for p in pairs if p["benchmark"] in shown]
    if not hits:
        return table
    benches = {p["benchmark"] for p in hits}

    def marked(t: PaperTable) -> PaperTable:
        cols = tuple(replace(c, header=f"{c.benchmark}‡{c.header[len(c.benchmark):]}")
                     if c.kind == "value" and c.benchmark in benches and c.header.startswith(c.benchmark) else c
                     for c in t.columns)
        return replace(t, columns=cols)

    line = ("‡ recited (contamination probe, " + PAPER + "; a model that completes a problem's text exactly may "
            "answer from memory): " + "; ".join(
                f"{p['model']} on {p['benchmark']} ({p['k']}/{p['n']} exact completions from the "
                f"{100 * p['fraction']:g} % prefix; threshold {100 * p['threshold']:g} %)" for p in hits)
            + f" - {', '.join(sorted({p['path'] for p in hits}))}.")
    out = marked(table)
    return replace(out, footer=out.footer + (line,), also=tuple(marked(t) for t in table.also))
