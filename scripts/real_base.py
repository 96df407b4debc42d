#!/usr/bin/env python
"""The real base table (issue 40, item 3): four real models x the paper's text benchmarks x two prompts, greedy.

    python scripts/real_base.py --plan                       # the seeded subsets -> results/real-base/items.json
    python scripts/real_base.py --run --models smol          # evaluate what is missing (resumable, cell by cell)
    python scripts/real_base.py --report                     # results/real-base.md from the committed predictions
    python scripts/real_base.py --redo smol/native/mbpp --reason "..."   # run a cell again (the old one is kept)

A *cell* is (model, prompt, benchmark). Each is scored by ``corl-bench eval``'s own function
(:func:`corl_bench.eval.targets.run_eval`) with ``--items results/real-base/items.json --prompt <paper|native>
--greedy --samples 0 --max-new-tokens <CAPS[benchmark]> --chunk <CHUNK>``; the model is loaded once per ``--run``
process (the same load ``corl-bench eval`` does) and every cell's rows go to the ignored work folder
``results/real-base/work/<prompt>/<model>/``. A finished cell is then copied to the committed folder
``results/real-base/predictions/<prompt>/<model>/<benchmark>.jsonl`` (GPQA rows without ``prompt``: GPQA's authors ask
that its questions are not re-published in plain text) and recorded in ``results/real-base/cells.json`` with the git
commit its process started from (the code it ran), its wall time, the CPU and the load average. A cell already in ``cells.json`` is skipped, so an
interrupted ``--run`` resumes with the same command (within a cell, the evaluator resumes chunk by chunk). ``--commit``
git-commits each cell's predictions and record as soon as it finishes (those paths only).

Subsets: each benchmark's problems in data order, shuffled with ``random.Random(f"{SEED}:{benchmark}")``; the first
``SIZES[benchmark]`` of that order (all of AIME24/25). Sizes and caps were fixed before any cell ran, from the
per-problem cost of SmolLM2 on 4 problems, so that the Qwen2.5-Coder-0.5B row (the most expensive one this session
can run) takes about an hour on the 2-core CPU; they never depended on a score. The 95 % interval of a cell is the
Wilson score interval of its greedy accuracy.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "results" / "real-base"
PAGE = REPO / "results" / "real-base.md"
SEED = 40
BENCHMARKS = ("gsm8k", "math500", "aime24", "aime25", "amc83", "gpqa_diamond", "humaneval", "mbpp")
SIZES = {"gsm8k": 40, "math500": 40, "aime24": 30, "aime25": 30, "amc83": 40, "gpqa_diamond": 40, "humaneval": 40,
         "mbpp": 40}
CAPS = {"gsm8k": 256, "math500": 384, "aime24": 384, "aime25": 384, "amc83": 384, "gpqa_diamond": 384,
        "humaneval": 256, "mbpp": 256}
"""New-token caps (the paper: 3072 sampled); a completion cut there counts as it stands (usually no answer)."""
ROW_SIZES = {"qwen2.5-coder-1.5b": 10}
"""Models whose row runs on a nested subset: the first n of each benchmark's same seeded order (so its problems are
among every other row's), in ``results/real-base/items-<model>.json``. Fixed by cost before any cell of the row ran:
the 0.5B row's measured seconds per problem x the parameter ratio (about 3) puts the 1.5B at n=40 near 5 hours here."""
CHUNK = 20
MODELS = {"smol": "SmolLM2-135M-Instruct", "gemma3-270m": "Gemma-3-270M (base)",
          "qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-coder-1.5b": "Qwen2.5-Coder-1.5B-Instruct"}
PROMPTS = ("paper", "native")
STRIP = {"gpqa_diamond": ("prompt",)}
"""Fields left out of the committed rows (GPQA: the rendered prompt holds the question and its options)."""


def plan(data_dir: str, cap: int | None = None) -> dict[str, list[str]]:
    """The seeded subsets (ids in the benchmark's data order); ``cap``: at most that many of each (the first of the
    same order, so a capped subset is nested in the full one)."""
    from corl_bench.eval.data import load_rows
    from corl_bench.eval.items import build_items
    from corl_bench.eval.specs import get_spec

    out = {}
    for name in BENCHMARKS:
        spec = get_spec(name)
        ids = [str(it.id) for it in build_items(spec, load_rows(spec, data_dir))]
        order = list(ids)
        random.Random(f"{SEED}:{name}").shuffle(order)
        chosen = set(order[: min(SIZES[name], cap or SIZES[name])])
        out[name] = [i for i in ids if i in chosen]
    return out


def items_path(model: str) -> Path:
    """The subset file a model's row runs on (:data:`ROW_SIZES`)."""
    return OUT / (f"items-{model}.json" if model in ROW_SIZES else "items.json")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()


def _cpu() -> str:
    from corl_bench.train.precision import cpu_model

    return f"{cpu_model()} x{os.cpu_count()}"


def _cells() -> dict:
    path = OUT / "cells.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _save_cells(cells: dict) -> None:
    (OUT / "cells.json").write_text(json.dumps(cells, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _publish(model: str, prompt: str, bench: str) -> Path:
    """Copy a finished cell's rows (minus :data:`STRIP`) and manifest into the committed folder."""
    src = OUT / "work" / prompt / model / "eval" / "final" / model
    dst = OUT / "predictions" / prompt / model
    dst.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(x) for x in (src / f"{bench}.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    drop = STRIP.get(bench, ())
    (dst / f"{bench}.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k not in drop},
                                                           ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    shutil.copyfile(src / "eval_manifest.json", dst / "eval_manifest.json")
    return dst / f"{bench}.jsonl"


def _commit_cell(key: str, summary: str) -> None:
    """Commit one finished cell's predictions and the cell records (only those paths)."""
    paths = [str(OUT / "predictions"), str(OUT / "cells.json")] + \
        ([str(OUT / "superseded.json")] if (OUT / "superseded.json").is_file() else [])
    subprocess.run(["git", "add", "--", *paths], cwd=REPO, check=True)
    subprocess.run(["git", "commit", "-q", "-m", f"real base table: cell {key} ({summary})", "--", *paths], cwd=REPO,
                   check=False)


def run(models: list[str], prompts: list[str], benchmarks: list[str], data_dir: str, threads: int,
        commit_cells: bool = False) -> None:
    import torch

    import corl_bench.models.load as load_mod
    from corl_bench.eval.targets import run_eval

    torch.set_num_threads(threads)
    for model in models:
        if not items_path(model).is_file():
            raise SystemExit(f"{items_path(model)} is missing; run: python scripts/real_base.py --plan")
    real_load = load_mod.load_model
    commit = _git("rev-parse", "HEAD")  # the code this process runs (later commits of cells do not change it)
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", "corl_bench", "benchmarks", "scripts"))
    for model in models:
        todo = [(p, b) for b in benchmarks for p in prompts if f"{model}/{p}/{b}" not in _cells()]  # both prompts
        # of a benchmark one after the other: a row cut short still compares them
        if not todo:
            print(f"{model}: every cell is done", flush=True)
            continue
        t = time.perf_counter()
        loaded = real_load(model)
        load_s = time.perf_counter() - t
        print(f"{model}: loaded in {load_s:.0f} s; {len(todo)} cells to run", flush=True)
        load_mod.load_model = lambda ref, **kw: loaded  # run_eval loads once per call: hand it this one
        try:
            for prompt, bench in todo:
                load1 = os.getloadavg()[0]
                t = time.perf_counter()
                res = run_eval(model, [bench], data_dir=data_dir, out=OUT / "work" / prompt / model, seed=0,
                               overrides={"samples": 0, "greedy": True, "max_new_tokens": CAPS[bench]},
                               chunk=CHUNK, items_file=items_path(model), prompt=prompt, report=lambda line: print(line, flush=True))
                secs = time.perf_counter() - t
                _publish(model, prompt, bench)
                lock = open(OUT / ".cells.lock", "w")  # two row processes may finish a cell at once
                fcntl.flock(lock, fcntl.LOCK_EX)
                cells = _cells()
                cells[f"{model}/{prompt}/{bench}"] = {
                    "commit": commit, "dirty": dirty, "seconds": round(secs, 1), "load_seconds": round(load_s, 1),
                    "n": res[model][bench]["n_problems"], "max_new_tokens": CAPS[bench], "chunk": CHUNK,
                    "threads": threads, "cpu": _cpu(), "loadavg_start": round(load1, 2),
                    "loadavg_end": round(os.getloadavg()[0], 2), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                               time.gmtime())}
                _save_cells(cells)
                greedy = res[model][bench].get("greedy")
                summary = f"n={cells[f'{model}/{prompt}/{bench}']['n']}, greedy {greedy}, {secs:.0f} s"
                print(f"{model}/{prompt}/{bench}: {summary}", flush=True)
                if commit_cells:
                    _commit_cell(f"{model}/{prompt}/{bench}", summary)
                lock.close()
        finally:
            load_mod.load_model = real_load
        loaded = None  # free it before the next model loads


def common_table(cells: dict) -> str:
    """Greedy accuracy of every model and prompt on the intersection of all rows' subsets (the nested smallest one)."""
    subsets = [json.loads(items_path(m).read_text(encoding="utf-8")) for m in MODELS if items_path(m).is_file()]
    if not subsets:
        return "(no subsets planned)"
    lines = ["| model | prompt | " + " | ".join(BENCHMARKS) + " |", "|" + "---|" * (len(BENCHMARKS) + 2)]
    for model in MODELS:
        for prompt in PROMPTS:
            out = []
            for bench in BENCHMARKS:
                keep = set.intersection(*(set(s[bench]) for s in subsets))
                rows = _rows(model, prompt, bench) if f"{model}/{prompt}/{bench}" in cells else None
                rows = [r for r in rows or [] if str(r["problem_id"]) in keep]
                out.append(f"{sum(bool(r['correct']) for r in rows)}/{len(rows)}" if len(rows) == len(keep) else "–")
            lines.append(f"| {MODELS[model]} | {prompt} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def redo(keys: list[str], reason: str) -> None:
    """Take finished cells out of ``cells.json`` so that ``--run`` evaluates them again; each old record, with its
    score, goes to ``superseded.json`` with ``reason`` (the page lists them), and its work rows are removed."""
    if not reason.strip():
        raise SystemExit("--redo needs --reason: why the cells are run again (the page shows it)")
    path = OUT / "superseded.json"
    with open(OUT / ".cells.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cells = _cells()
        old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
        for key in keys:
            if key not in cells:
                raise SystemExit(f"--redo {key}: not a finished cell (keys look like qwen2.5-coder-0.5b/native/mbpp)")
            model, prompt, bench = key.split("/")
            rows = _rows(model, prompt, bench) or []
            old.append({"cell": key, "correct": sum(bool(r["correct"]) for r in rows), "n": len(rows),
                        "reason": reason, "superseded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "record": cells.pop(key)})
            (OUT / "work" / prompt / model / "eval" / "final" / model / f"{bench}.jsonl").unlink(missing_ok=True)
            print(f"{key}: taken out ({old[-1]['correct']}/{old[-1]['n']} before); --run evaluates it again")
        path.write_text(json.dumps(old, indent=1) + "\n", encoding="utf-8")
        _save_cells(cells)


def superseded_lines() -> list[str]:
    path = OUT / "superseded.json"
    if not path.is_file():
        return []
    out = ["", "Superseded cells (run again; the first result is kept here and in git history):", ""]
    for s in json.loads(path.read_text(encoding="utf-8")):
        out.append(f"* {s['cell']}: {s['correct']}/{s['n']} at `{s['record']['commit'][:10]}`, superseded "
                   f"{s['superseded_at'][:10]}: {s['reason']}")
    return out


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def _rows(model: str, prompt: str, bench: str) -> list[dict] | None:
    path = OUT / "predictions" / prompt / model / f"{bench}.jsonl"
    if not path.is_file():
        return None
    return [r for r in (json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip())
            if r.get("decoding") == "greedy"]


def _paper_regrade(bench: str, rows: list[dict]) -> int | None:
    """How many of a native cell's completions the paper spec's extractor and grader would credit (None for code:
    the tests decide, whatever the prompt)."""
    from corl_bench.eval.scoring import grade_text
    from corl_bench.eval.specs import get_spec

    spec = get_spec(bench)
    if spec.task == "code":
        return None
    return sum(grade_text(str(r.get("completion") or ""), str(r["gold"]), spec.extractor, spec.grader)[1]
               for r in rows)


def report() -> str:
    from corl_bench.eval.native import style_of  # noqa: F401  (the page cites its rule)

    cells = _cells()
    items = {m: json.loads(items_path(m).read_text(encoding="utf-8")) for m in MODELS if items_path(m).is_file()}
    head = "| model | prompt | " + " | ".join(BENCHMARKS) + " |"
    lines = [head, "|" + "---|" * (len(BENCHMARKS) + 2)]
    detail = ["| cell | n | correct | greedy % | 95 % Wilson | paper's extractor % | no answer % | hit cap % | "
              "mean tokens | seconds | s/problem | commit |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    total = 0
    for model in MODELS:
        for prompt in PROMPTS:
            out = []
            for bench in BENCHMARKS:
                rows = _rows(model, prompt, bench)
                key = f"{model}/{prompt}/{bench}"
                if rows is None or key not in cells:
                    out.append("–")
                    continue
                n, k = len(rows), sum(bool(r["correct"]) for r in rows)
                if n != len(items[model][bench]):
                    out.append(f"({n}/{len(items[model][bench])} rows)")
                    continue
                lo, hi = wilson(k, n)
                out.append(f"{100 * k / n:.1f} [{100 * lo:.0f}–{100 * hi:.0f}]")
                c = cells[key]
                total += c["seconds"]
                none = sum(r.get("extracted") in (None, "") for r in rows)
                capped = sum(not r.get("finished", True) for r in rows)
                toks = sum(r.get("n_tokens", 0) for r in rows) / n
                strict = _paper_regrade(bench, rows) if prompt == "native" else None
                detail.append(f"| {key} | {n} | {k} | {100 * k / n:.1f} | {100 * lo:.1f}–{100 * hi:.1f} | "
                              f"{'–' if strict is None else f'{100 * strict / n:.1f}'} | "
                              f"{100 * none / n:.0f} | {100 * capped / n:.0f} | {toks:.0f} | {c['seconds']:.0f} | "
                              f"{c['seconds'] / n:.1f} | `{c['commit'][:10]}`{' (dirty)' if c.get('dirty') else ''} |")
            lines.append(f"| {MODELS[model]} | {prompt} | " + " | ".join(out) + " |")
    notes = [f"* {key}: {c['note']}" for key, c in sorted(cells.items()) if c.get("note")]
    if notes:
        detail += ["", "Notes on cells:", "", *notes]
    detail += superseded_lines()
    full = json.loads((OUT / "items.json").read_text(encoding="utf-8"))
    sizes = ", ".join(f"{b} {len(full[b])}" for b in BENCHMARKS)
    nested = "; ".join(f"{MODELS[m]}: the first {n} of each order (`results/real-base/items-{m}.json`)"
                       for m, n in ROW_SIZES.items())
    caps = ", ".join(f"{b} {CAPS[b]}" for b in BENCHMARKS)
    cpus = sorted({c["cpu"] for c in cells.values()})
    loads = [c["loadavg_start"] for c in cells.values()]
    return TEMPLATE.format(table="\n".join(lines), detail="\n".join(detail), sizes=sizes, nested=nested,
                           common=common_table(cells), caps=caps, seed=SEED,
                           chunk=CHUNK, cpus=", ".join(cpus) or "–",
                           threads=" or ".join(str(t) for t in sorted({c.get("threads", 2) for c in cells.values()})), total=total / 60, n_cells=len(cells),
                           loads=f"{min(loads):.1f}–{max(loads):.1f}" if loads else "–")


TEMPLATE = """# The real base table: four small real models on the paper's text benchmarks

Generated by `python scripts/real_base.py --report` from the committed predictions in `results/real-base/predictions/`
and the cell records in `results/real-base/cells.json` (issue 40, item 3). Do not edit by hand.

Greedy accuracy in % with the **95 % Wilson score interval** in brackets, on fixed seeded subsets. "–" = not run yet.

{table}

**Benchmarks.** GSM8K, MATH-500, AIME 2024, AIME 2025, AMC (the 83-problem AMC 12 2022+2023 set of the paper's
"AMC" column), GPQA-Diamond and the code benchmarks HumanEval and MBPP (test split), the programs run in the project's
sandbox against the benchmarks' tests. **LiveCodeBench is not here**: there is no local copy of its data
(`../shared/data/README.md`: 4.5 GB with private tests, not on GitHub as plain files), so HumanEval and MBPP stand in
for the code column.

**Subsets** (seed {seed}: each benchmark's problems shuffled with `random.Random("{seed}:<benchmark>")`, the first n
kept, listed in `results/real-base/items.json`): {sizes}. They are small — a cell of 40 problems has an interval of
about ±15 points — because the sizes were fixed so that the most expensive row this CPU could run (Qwen2.5-Coder-0.5B)
takes about an hour; the sizes and caps were fixed before any cell ran and never depended on a score. Rows on a
smaller nested subset, fixed by cost before the row ran: {nested}. Their cells are the first n problems of the same
orders, so they are compared with the other models on those problems below.

**Decoding.** Greedy, one completion per problem (`--greedy --samples 0`), the engine `fast`, {chunk} problems per
batch, new-token caps (the paper samples with 3072): {caps}. A completion cut at its cap counts as it stands.

**Prompts.** `paper` is each benchmark spec's own prompt (`benchmarks/*.yaml`: the paper's instruction in the model's
chat template where it has one, plain otherwise; HumanEval and MBPP as base-model continuations). `native` is the
model's own format (`corl_bench/eval/native.py`), by one rule fixed from the model cards, never tried on test items:
a model with a chat template (SmolLM2-Instruct, Qwen2.5-Coder-Instruct) is asked zero-shot in its template — math:
step by step, ending "The answer is: ..."; GPQA: OpenAI simple-evals' instruction ("Answer: $LETTER"); code: EvalPlus'
chat prompt, its instruction (a self-contained script in a markdown block) and its reply opening (a sentence and an
open python fence the model continues, graded as opening + completion; the cells run before 2026-12-06 without the
opening are listed under "Superseded cells"); a model without one (the Gemma-3-270M base model) continues
few-shot plain text — GSM8K: four of Wei et al.'s chain-of-thought exemplars; MATH-500, AIME, AMC: Minerva's four
shots (MATH train problems); GPQA: zero-shot `Question: ... Answer:`, the first option letter written; HumanEval: the
paper's continuation (the same prompt as `paper`); MBPP: lm-eval's three shots (prompt split, task ids 2–4). Native math
answers are read with the `qwen` extractor (Minerva's line, `\\boxed{{}}`, "the answer is", last number); the paper's
prompt keeps its spec's extractor (GSM8K: last number; MATH/AIME/AMC: last `\\boxed{{}}` only; GPQA: boxed letter or
"answer is (X)").

**Reading the two rows of a model.** They differ in the prompt *and* in how an answer is read: the paper's math
benchmarks other than GSM8K credit only a `\\boxed{{}}` answer, the native rows read Minerva's line, a box, "the
answer is" and, failing those, the last number, which can credit a number that happens to be last. So a native row
above a paper row says the model answers when asked its own way and read leniently, not that it reasons better.

GPQA-Diamond has four options: guessing scores 25 % in expectation, so a GPQA cell is read against that, not 0.

**GPQA.** Its authors ask that the questions are not re-published in plain text: the committed GPQA rows have no
`prompt` field (ids, completions, extracted answers, gold letters and correctness only). A completion can still quote
part of a question.

**Cost.** {n_cells} cells done, {total:.0f} min of evaluation in all (model loading not counted; it is in each cell's
record), on {cpus}, one evaluation process at a time with {threads} torch thread(s) (per cell in `cells.json`); the 1-minute load average at the start of the cells
was {loads} (other jobs shared the two cores at times: timings are indicative).

## Every model on the smallest subset

Each cell re-scored on the problems of the smallest row's subset only (the first 10 of each seeded order; the rows
above differ in n, so this is the like-for-like comparison; with 10 problems an interval is about ±30 points):

{common}

## Every cell

"paper's extractor" = a native cell's completions re-graded with the paper spec's extractor and grader (the
part of the native score that does not come from the lenient reading); "hit cap" = the completion reached the
new-token cap; "commit" = the commit the cell ran at (`dirty`: with
uncommitted changes to `corl_bench/`, `benchmarks/` or `scripts/` when the run started).

{detail}

Resume or extend (each finished cell is skipped):

```bash
export CORL_BENCH_DATA=../shared/data
make qwen                                  # the Qwen2.5-Coder packages, once (issue 40 item 1)
python scripts/real_base.py --run --commit --models smol,gemma3-270m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b
python scripts/real_base.py --report
```

On two cores shared with other busy processes pass `--threads 1`: two torch threads spin-wait against them (here an
AIME chunk of 10 problems did not finish in 11 minutes with 2 threads beside two test suites, and took 2 minutes
after a restart with 1 thread).
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", action="store_true", help="write results/real-base/items.json (the seeded subsets)")
    ap.add_argument("--run", action="store_true", help="evaluate the cells not yet in cells.json")
    ap.add_argument("--report", action="store_true", help="write results/real-base.md")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--prompts", default=",".join(PROMPTS))
    ap.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    ap.add_argument("--data-dir", default=os.environ.get("CORL_BENCH_DATA") or str(REPO.parent / "shared" / "data"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--commit", action="store_true", help="git-commit each finished cell's predictions")
    ap.add_argument("--redo", default="", help="cells (model/prompt/benchmark, comma-separated) to run again")
    ap.add_argument("--reason", default="", help="why --redo: recorded with the superseded cells")
    args = ap.parse_args()
    if not (args.plan or args.run or args.report or args.redo):
        ap.error("pick --plan, --run, --redo or --report")
    OUT.mkdir(parents=True, exist_ok=True)
    if args.plan:
        for path, cap in [(OUT / "items.json", None), *((items_path(m), n) for m, n in ROW_SIZES.items())]:
            path.write_text(json.dumps(plan(args.data_dir, cap), indent=1) + "\n", encoding="utf-8")
            print(f"wrote {path}")
    if args.redo:
        redo(args.redo.split(","), args.reason)
    if args.run:
        bad = [m for m in args.models.split(",") if m not in MODELS]
        if bad:
            raise SystemExit(f"unknown model {bad[0]!r}; valid: {', '.join(MODELS)}")
        run(args.models.split(","), args.prompts.split(","), args.benchmarks.split(","), args.data_dir, args.threads,
            commit_cells=args.commit)
    if args.report:
        PAGE.write_text(report(), encoding="utf-8")
        print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
