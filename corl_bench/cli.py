"""``corl-bench``: run, validate, ls, table, eval, data prepare. Each command is a thin wrapper over a library function.

Heavy imports (torch, transformers) happen inside ``run`` only, so ``ls``, ``validate`` (until it checks the GRPO
loss name) and ``table`` start quickly.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from corl_bench.cli_listing import LISTINGS, print_listing
from corl_bench.cli_flags import RunFlags, aliased, load_run_config, resume_command, run_flags, \
    sweep_command, version_text
from corl_bench.config import ConfigError, dump_config
from corl_bench.registries import RegistryError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark harness for label-free RL: Co-RL, TTRL, GT-Reward, ... on one GRPO core. Flags mean "
                  "one thing in every command: --output-dir a directory that holds several outputs (run directories, "
                  "table files), --out/-o one output (a file or one result folder), --benchmarks/-b a comma list.")
console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version (and the git commit of a checkout) and exit")) -> None:
    """Benchmark harness for label-free RL: Co-RL, TTRL, GT-Reward, ... on one GRPO core."""


KINDS = ("methods", "cohorts", "benchmarks", "families", "profiles", "engines")


def _fail(msg: str) -> None:
    from rich.markup import escape

    console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def _setup_logging(verbose: bool) -> None:
    """Rich records in a terminal; plain timestamped lines in CI logs, under nohup or through a pipe."""
    if console.is_terminal:
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(console=console, show_path=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler], force=True)
    for noisy in ("transformers", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    for hub in ("huggingface_hub", "datasets", "filelock", "fsspec"):  # hub retries and cache chatter: only with -v
        logging.getLogger(hub).setLevel(logging.INFO if verbose else logging.ERROR)


@app.command()
@run_flags
def run(flags: RunFlags) -> None:
    """Train + evaluate one (method, cohort, seed) cell; writes results/runs/<run_id>/.

    An interrupted run with exactly the same config is resumed from its last checkpoint (--fresh: start anew);
    Ctrl-C prints the command that resumes it."""
    _setup_logging(flags.verbose)
    opened: list[Path] = []  # the run directory, once the runner has opened it
    try:
        cfg = load_run_config(flags)
        from corl_bench.train.runner import canonical_names, resolve, run as run_cell
        from corl_bench.train.resume import check_resumable

        cfg = canonical_names(cfg)  # Co-RL -> corl, said once
        plan = resolve(cfg)  # fail fast, before torch is imported and before anything is written
        if flags.resume is not None:
            check_resumable(flags.resume, plan.config)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # weight-loading bars would break the run's progress display
        run_dir = run_cell(cfg, console=console, resume=flags.resume, auto_resume=not flags.fresh,
                           on_open=opened.append)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    except Exception as e:
        from corl_bench.train.agent import NumericalError
        from corl_bench.train.session import ResourceError

        if isinstance(e, (ResourceError, NumericalError)):
            _fail(str(e))
        raise
    except KeyboardInterrupt:
        if opened:
            _fail(f"interrupted; {opened[-1]} keeps what was written so far (run.json status: failed). Resume it "
                  f"from its last checkpoint with: {resume_command(opened[-1], flags.verbose)}")
        _fail("interrupted before training started (no run to resume yet): run the same command again")
    console.print(f"run directory: {run_dir}", markup=False, highlight=False, soft_wrap=True)


@app.command()
@run_flags
def validate(flags: RunFlags,
             config_file: Optional[Path] = typer.Argument(None, metavar="CONFIG", help="YAML config (default: "
                                                          "built-in defaults; the same as --config)"),
             elsewhere: bool = typer.Option(False, "--elsewhere", help="check the config for another machine: what "
                                            "this one lacks (a CUDA device, a data copy, a reachable hub) is a "
                                            "warning, not an error")) -> None:
    """Check a config without training: print the resolved config that run would run with the same flags, the
    derived batch sizes, and whether it would resume a run (warnings, e.g. a hub model that will be downloaded, go
    to stderr). Takes every flag of run and refuses exactly what run would refuse before step 1."""
    _setup_logging(flags.verbose)
    if config_file is not None and flags.config is not None and config_file != flags.config:
        _fail(f"two configs given ({config_file} and --config {flags.config}); pass one")
    if config_file is not None:
        flags = dataclasses.replace(flags, config=config_file)
    try:
        cfg = load_run_config(flags)
        from contextlib import nullcontext

        from corl_bench.config import checking_for_elsewhere
        from corl_bench.train.runner import canonical_names, resolve

        cfg = canonical_names(cfg)
        with checking_for_elsewhere() if elsewhere else nullcontext():
            plan = resolve(cfg)
        would = _would_resume(flags, plan.config)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    cfg = plan.config
    k = cfg.rollout.samples_per_prompt
    n = plan.method_cls(plan.options, cfg.cohort.agents).generation_n(k)
    typer.echo(dump_config(cfg), nl=False)
    agents = len(cfg.cohort.agents)
    for note in plan.notes:
        console.print(f"[cyan]{plan.config.model.profile} profile:[/] {note}", highlight=False, soft_wrap=True)
    console.print(f"[green]valid.[/] {agents} agent(s); per step and agent: {cfg.rollout.prompts_per_step} prompts "
                  f"x {n} generated ({k} trained) = {cfg.rollout.prompts_per_step * k} trained completions; "
                  f"{cfg.run.steps} steps", highlight=False)
    console.print(would, highlight=False, markup=False, soft_wrap=True)


def _would_resume(flags: RunFlags, cfg: Any) -> str:
    """What ``run`` with these flags would do with the run directory: resume which one, or start a new one."""
    from corl_bench.train.resume import check_resumable, find_interrupted

    if flags.resume is not None:
        check_resumable(flags.resume, cfg)
        return f"run would resume {flags.resume} from its last checkpoint"
    found = None if flags.fresh else find_interrupted(Path(cfg.run.output_dir), cfg)
    if found is not None:
        return f"run would resume the interrupted run {found} (same config; --fresh starts a new one)"
    return f"run would start a new run directory under {cfg.run.output_dir}"


@app.command("ls")
def ls(kind: str = typer.Argument("methods", help="methods | cohorts | benchmarks | families | profiles | engines")
       ) -> None:
    """List what is registered (never imports torch). Names are never cut: a table in a terminal wide enough for
    them, else (a pipe, a log, a narrow terminal) plain tab-separated rows under a header row."""
    from corl_bench import registries

    if kind not in KINDS:
        _fail(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    try:
        columns, rows = LISTINGS[kind](getattr(registries, kind.upper()))
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    print_listing(kind, columns, rows)


@app.command("config")
def config_reference(key: Optional[str] = typer.Argument(None, help="a section (grpo) or one key (grpo.lr); "
                                                         "nothing: the list of sections")) -> None:
    """Print the config reference: the sections, a section's keys, or one key's type, default and meaning.

    The documentation site's Configuration keys page is generated from the same field docstrings."""
    from corl_bench.docref import describe

    try:
        text = describe(key)
    except ConfigError as e:
        _fail(str(e))
    typer.echo(text)


@app.command()
def table(results_dir: Optional[Path] = typer.Option(None, "--results-dir", "-r", help="the runs to show: every "
                                                    "run.json below DIR (default results/runs, where `corl-bench run` "
                                                    "writes; a run's --output-dir, a study, or one run directory)"),
          study: Optional[str] = typer.Option(None, "--study", help="a committed study by name: the directory "
                                              "results/NAME (any directory directly under results/ that holds runs, "
                                              "other than runs/), e.g. real-study, micro-study"),
          metrics: str = typer.Option("avg_k", "--metric", "--metrics", help="comma list of avg_k (sampled pass@1), "
                                      "greedy, maj_k, pass_k; one column group each, Avg and Δ use the first"),
          fmt: Optional[str] = typer.Option(None, "--format", "-f", help="md | latex | csv | html (printed, or "
                                            "written to --out)"),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the table to FILE atomically "
                                             "(format from --format or the suffix) instead of table.md/table.csv"),
          reference: Optional[str] = typer.Option(None, "--reference", help="'paper': the paper's values beside "
                                                  "ours (or its table on its own where nothing overlaps)"),
          backbone: Optional[str] = typer.Option(None, "--backbone", help="paper backbone to show on its own, "
                                                 "e.g. Qwen2.5-3B (implies --reference paper)"),
          out_dir: Optional[Path] = typer.Option(None, "--output-dir", help="where table.md/table.csv go (default: "
                                                 "the results dir; with --study NAME results/tables/NAME)"),
          out_dir_old: Optional[Path] = typer.Option(None, "--out-dir", hidden=True, help="deprecated: --output-dir"),
          se: bool = typer.Option(False, "--se", help="show each cell's evaluation standard error (sd over problems "
                                  "/ sqrt(problems)) after mean ± sd; the CSV always has it"),
          show_warnings: bool = typer.Option(False, "--warnings", "-W", help="print every warning (default: one "
                                             "summary line), with the runs behind each environment difference"),
          contamination: Optional[Path] = typer.Option(None, "--contamination", help="a contamination.json (corl-bench "
                                                       "probe contamination) whose recited benchmarks get ‡ (default: "
                                                       "every one under the results dir)")) -> None:
    """Paper-style results of your runs (results/runs, or -r DIR; a committed study with --study NAME), recomputed
    from stored predictions; Δ is each run's gain over its own base evaluation on the same problems."""
    from corl_bench.report import table as table_mod

    chosen = tuple(m.strip() for m in metrics.split(",") if m.strip())
    try:
        if study is not None and results_dir is not None:
            raise ValueError(f"give --study {study} or -r {results_dir}, not both (--study NAME is -r "
                             f"{table_mod.RESULTS_ROOT}/NAME)")
        out_dir = aliased("--output-dir", out_dir, "--out-dir", out_dir_old)
        if study is not None and out_dir is None and out is None:  # never write into a committed study
            out_dir = table_mod.RESULTS_ROOT / "tables" / study
        where = (table_mod.study_dir(study) if study is not None else
                 results_dir if results_dir is not None else table_mod.RESULTS_ROOT / table_mod.RUNS_DIR)
        table_mod.main(where, metrics=chosen, out_dir=out_dir, fmt=fmt, out=out, reference=reference,
                       backbone=backbone, console=Console(), err_console=console, se=se, show_warnings=show_warnings,
                       contamination=contamination)
    except ValueError as e:
        _fail(str(e))


@app.command()
def sweep(spec_path: Path = typer.Argument(..., help="sweep YAML: methods, cohorts, seeds, set, output_dir"),
          dry_run: bool = typer.Option(False, "--dry-run", help="list the cells and their status; run nothing"),
          threads: int = typer.Option(0, "--threads", help="torch threads per cell (sets model.threads; 0 = the "
                                      "config's). Workers started on the same sweep share its cells"),
          ray: bool = typer.Option(False, "--ray", help="run every cell as a Ray task (a local Ray, or the "
                                   "cluster of --ray-address / $RAY_ADDRESS)"),
          ray_address: str = typer.Option("", "--ray-address", help="with --ray: e.g. auto (the cluster started "
                                           "here with `ray start --head`) or ray://host:10001"),
          cpus_per_cell: float = typer.Option(1.0, "--cpus-per-cell", help="with --ray: CPUs Ray reserves per cell"),
          cells: list[str] = typer.Option([], "--cell", help="run only this cell, by run id (repeatable; --dry-run "
                                          "lists them)"),
          rerun: bool = typer.Option(False, "--rerun", help="with --cell: start those cells afresh; their earlier "
                                     "directories are moved to <output_dir>/replaced/<run id>-<time>/ (and <keep>/"
                                     "replaced/), run.json renamed run.replaced.json so tables skip them"),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="log every stage (INFO)")) -> None:
    """Run a grid of methods x cohorts x seeds one cell after another; finished cells are skipped, interrupted
    ones resumed (--cell RUN_ID: only that cell; --rerun: afresh). Start it in several shells to run cells in parallel (each cell is claimed by one worker), or
    with --ray to run the cells as Ray tasks on a machine or a cluster."""
    from corl_bench.train.sweep import cell_status, describe, load_sweep, plan, run_sweep, select

    _setup_logging(verbose)
    try:
        spec = load_sweep(spec_path)
        if dry_run:
            planned, skipped = plan(spec)
            for cell in select(spec, planned, cells):
                Console().print(f"{cell.run_id}: {cell_status(spec, cell)}", highlight=False)
            for line in skipped:
                Console().print(f"skipped {line}", highlight=False)
            return
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if threads < 0:
            _fail(f"--threads must be >= 0 (got {threads}); 0 keeps the config's model.threads")
        if cpus_per_cell <= 0:
            _fail(f"--cpus-per-cell must be > 0 (got {cpus_per_cell})")
        if (ray or ray_address) and importlib.util.find_spec("ray") is None:
            _fail("--ray needs Ray: pip install -c constraints-cpu.txt -e '.[ray]'")
        result = run_sweep(spec, console=console, threads=threads, ray_address=ray_address if ray or ray_address
                           else None, cpus_per_cell=cpus_per_cell, only=cells, rerun=rerun)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("interrupted; finished cells are kept and the interrupted one resumes from its last checkpoint with: "
              + sweep_command(spec_path, threads=threads, ray=ray, ray_address=ray_address,
                              cpus_per_cell=cpus_per_cell, cells=cells, verbose=verbose))
    for line in describe(result):
        console.print(line, highlight=False)
    if result["failed"]:
        raise typer.Exit(code=1)


@app.command("eval")
def eval_(target: str = typer.Argument(..., help="a run directory (RUN_DIR:agent for one agent); a model folder "
                                        "(save_pretrained) or a hub id owner/name, optionally @revision (cached, "
                                        "else downloaded first), of any causal LM or vision-language model (an "
                                        "image-text-to-text checkpoint loads with its own processor); a model entry "
                                        "(smol, gemma3-270m, qwen2.5-coder-0.5b, "
                                        "qwen2.5-coder-1.5b); or a micro family"),
          benchmarks: Optional[str] = typer.Option(None, "--benchmarks", "-b", help="comma list (corl-bench ls "
                                                   "benchmarks); required"),
          benchmark: Optional[str] = typer.Option(None, "--benchmark", hidden=True, help="same as --benchmarks"),
          data_dir: Optional[str] = typer.Option(None, "--data-dir", help="local benchmark data (or $CORL_BENCH_DATA)"),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="for a model: its result folder (default "
                                             "results/evals/<name>); a run's go into the run directory"),
          phase: str = typer.Option("final", "--phase", help="for a run: final checkpoints or base models"),
          engine: str = typer.Option("ours", "--engine", help="ours | lm-eval | vlmevalkit (image benchmarks, "
                                     "through the VLMEvalKit bridge)"),
          seed: int = typer.Option(0, "--seed", help="sampling seed"),
          max_problems: Optional[int] = typer.Option(None, "--max-problems", help="first N problems (a stated subset)"),
          items: Optional[Path] = typer.Option(None, "--items", help="a JSON object, benchmark -> list of problem ids: evaluate "
                                               "only those problems (e.g. a seeded subset)"),
          prompt: str = typer.Option("paper", "--prompt", help="paper (the spec's prompt) | native (the model's own "
                                     "format: chat models zero-shot in their template, base models few-shot; see "
                                     "corl_bench/eval/native.py)"),
          samples: Optional[int] = typer.Option(None, "--samples", help="override the spec's k"),
          greedy: bool = typer.Option(False, "--greedy", help="also decode greedily once per problem (with "
                                      "--samples 0: greedy only)"),
          max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="override the spec's cap"),
          code_timeout: float = typer.Option(10.0, "--code-timeout", help="CPU seconds per HumanEval/MBPP program"),
          workers: int = typer.Option(2, "--workers", help="sandboxed programs run at once"),
          chunk: int = typer.Option(32, "--chunk", help="problems per generation batch (x k samples); saved per chunk"),
          judge: Optional[str] = typer.Option(None, "--judge", help="LLM judge (model folder or cached hub id) that "
                                              "re-checks answers the rules marked wrong; off by default"),
          extractor: Optional[str] = typer.Option(None, "--extractor", help="image benchmarks only: another "
                                                  "extractor, e.g. answer_tag (the paper's <answer> format)"),
          max_image_side: int = typer.Option(0, "--max-image-side", help="image benchmarks: downscale images to "
                                             "this longer side first (the paper's VLM protocol: 1024); 0 = off"),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="log every stage (INFO)")) -> None:
    """Evaluate language and vision-language models on benchmark specs; per-sample predictions are kept and a re-run
    skips what exists. Image benchmarks (MathVision, MathVerse, MathVista, We-Math) need a vision-language model."""
    from corl_bench.eval.targets import run_eval

    _setup_logging(verbose)
    try:
        benchmarks = aliased("--benchmarks", benchmarks, "--benchmark", benchmark, deprecated=False)
        names = [b.strip() for b in (benchmarks or "").split(",") if b.strip()]
        if not names:
            raise ConfigError("no benchmark given; pass --benchmarks/-b, e.g. -b gsm8k,math500 (corl-bench ls "
                              "benchmarks)")
        run_eval(target, names, data_dir=data_dir, phase=phase, out=out, seed=seed, max_problems=max_problems,
                 overrides={"samples": samples, "max_new_tokens": max_new_tokens, "greedy": greedy or None},
                 engine=engine,
                 code_timeout=code_timeout, workers=workers, chunk=chunk, judge=judge, extractor=extractor,
                 max_image_side=max_image_side, items_file=items, prompt=prompt,
                 report=lambda line: Console().print(line, highlight=False))
    except (ConfigError, RegistryError) as e:
        _fail(str(e))


data_app = typer.Typer(no_args_is_help=True, help="Benchmark data: freeze to a local directory with checksums.")
app.add_typer(data_app, name="data")


@data_app.command("prepare")
def data_prepare(benchmarks: Optional[str] = typer.Option(None, "--benchmarks", "-b", help="comma list; required"),
                 benchmark: Optional[str] = typer.Option(None, "--benchmark", hidden=True, help="same as --benchmarks"),
                 out: Optional[Path] = typer.Option(None, "--out", "-o", help="the folder to freeze the data into; "
                                                    "required"),
                 dest: Optional[Path] = typer.Option(None, "--dest", hidden=True, help="deprecated: --out"),
                 data_dir: Optional[str] = typer.Option(None, "--data-dir", help="where to read from (else env/hub)")) -> None:
    """Freeze benchmarks to the --out folder in the local schema with sha256 checksums (then use --data-dir there)."""
    from corl_bench.eval.specs import get_spec
    from corl_bench.eval.data import prepare

    try:
        benchmarks = aliased("--benchmarks", benchmarks, "--benchmark", benchmark, deprecated=False)
        dest = aliased("--out", out, "--dest", dest)
        if not benchmarks or dest is None:
            raise ConfigError("pass --benchmarks/-b and --out, e.g. corl-bench data prepare -b gsm8k --out frozen/")
        specs = [get_spec(b.strip()) for b in benchmarks.split(",") if b.strip()]
        manifest = prepare(specs, dest, data_dir)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    for name, info in sorted(manifest["benchmarks"].items()):
        Console().print(f"{name}@{info['version']}: {info['rows']} rows -> {dest / info['file']}", highlight=False)


@app.command()
def probe(models: list[str] = typer.Argument(..., help="2+ models: micro family, folder, smol, RUN_DIR[:agent], "
                                             "MODEL@SEED (seed-only partner); with --from-predictions: "
                                             "RUN_DIR[:agent], a predictions .jsonl or its folder; or the word "
                                             "contamination, then 1+ models"),
          benchmark: Optional[str] = typer.Option(None, "--benchmark", "-b", help="one benchmark (corl-bench ls "
                                                  "benchmarks); required (contamination: a comma list, default "
                                                  "gsm8k,math500)"),
          benchmarks: Optional[str] = typer.Option(None, "--benchmarks", hidden=True, help="same as --benchmark"),
          samples: int = typer.Option(1, "--samples", help="paired draws averaged (paper: 1)"),
          temperature: float = typer.Option(0.8, "--temperature", help="sampling temperature (paper: 0.8)"),
          greedy: bool = typer.Option(False, "--greedy", help="greedy decoding (stored: the greedy rows) instead"),
          max_problems: Optional[int] = typer.Option(None, "--max-problems", help="first N problems"),
          max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="override the spec's cap "
                                                        "(contamination: cap of each completion, default 256)"),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="predictions + probe.json/probe.md (default "
                                             "results/probe/<benchmark>-<decoding>, contamination: results/"
                                             "contamination; reuse it to resume)"),
          seed: int = typer.Option(0, "--seed", help="sampling seed of models without @SEED"),
          phase: str = typer.Option("base", "--phase", help="for runs: base (pre-RL) or final"),
          from_predictions: bool = typer.Option(False, "--from-predictions", help="no generation: read stored "
                                                "predictions (sample_index 0.. of the sampled rows; contamination: "
                                                "the stored completions, incomplete pairs left out)"),
          data_dir: Optional[str] = typer.Option(None, "--data-dir", help="local benchmark data (or $CORL_BENCH_DATA)"),
          chunk: int = typer.Option(32, "--chunk", help="problems per generation batch; saved per chunk"),
          fractions: str = typer.Option("0.4,0.6,0.8", "--fractions", help="probe contamination: prefix fractions "
                                        "of each problem's text, each in (0, 1)"),
          threshold: float = typer.Option(0.10, "--threshold", help="probe contamination: flag 'recites' at this "
                                          "exact-completion rate from the 80% prefix"),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="log every stage (INFO)")) -> None:
    """Pre-RL error-overlap probe of every pair of models: Cohen's kappa on right/wrong, c (exactly one right),
    w (both wrong, same answer), u (at least one right), accuracies; writes probe.json + probe.md.
    `corl-bench probe contamination MODEL... -b gsm8k,math500`: can each model complete the benchmarks' problem
    texts from a 40/60/80 % prefix (arXiv 2507.10532); writes contamination.json + contamination.md."""
    from corl_bench.report import probe as probe_cmd

    _setup_logging(verbose)
    say = Console() if Console().is_terminal else Console(width=160)  # a pipe or file gets whole rows
    if models[0] == "contamination":  # corl-bench probe contamination MODEL...
        _contamination(models[1:], benchmarks or benchmark, fractions, threshold, max_problems, max_new_tokens, out,
                       data_dir, from_predictions, chunk, say)
        return
    try:
        benchmark = _one_benchmark(benchmark, benchmarks)
        if from_predictions:
            rep = probe_cmd.probe_from_predictions(models, benchmark, phase=phase, greedy=greedy, samples=samples,
                                                   max_problems=max_problems, out=out)
        else:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            rep = probe_cmd.probe_generate(models, benchmark, samples=samples, temperature=temperature, greedy=greedy,
                                           max_new_tokens=max_new_tokens, max_problems=max_problems, phase=phase,
                                           seed=seed, out=out, data_dir=data_dir, chunk=chunk,
                                           report=lambda line: say.print(line, highlight=False))
        paths = probe_cmd.write_report(rep)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    say.print(probe_cmd.probe_table(rep))
    for note in (f"{p.a} x {p.b}: kappa {p.kappa_note}" for p in rep.pairs if p.kappa_note):
        say.print(note, highlight=False)
    say.print(f"wrote {paths[0]} and {paths[1]}", highlight=False)


def _contamination(models: list[str], benchmarks: Optional[str], fractions: str, threshold: float,
                   max_problems: Optional[int], cap: Optional[int], out: Optional[Path], data_dir: Optional[str],
                   from_predictions: bool, chunk: int, say: Console) -> None:
    """``corl-bench probe contamination`` (:mod:`corl_bench.report.contamination`), one-line errors."""
    from corl_bench.report import contamination as cont

    out = out or Path("results") / "contamination"
    try:
        names = tuple(b.strip() for b in (benchmarks or "gsm8k,math500").split(",") if b.strip())
        if cap is not None and cap < 1:
            raise ConfigError(f"--max-new-tokens must be >= 1 (got {cap}); the contamination probe's default is 256")
        settings = cont.ContaminationSettings(names, cont.parse_fractions(fractions), max_problems, threshold,
                                              max_new_tokens_cap=cap or 256, data_dir=data_dir, batch=chunk)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        data = cont.probe_contamination(models, settings, out, report=lambda line: say.print(line, highlight=False),
                                        generate=not from_predictions)
        paths = cont.write_reports(data, out)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    for res in data["results"]:
        say.print(f"{res['model']} / {res['benchmark']}: {res['flag']}", highlight=False)
    say.print(f"wrote {paths[0]} and {paths[1]}", highlight=False)


def _one_benchmark(benchmark: Optional[str], benchmarks: Optional[str]) -> str:
    """The one benchmark of probe and ensemble, under --benchmark/-b or --benchmarks (one-line ConfigError)."""
    name = aliased("--benchmark", benchmark, "--benchmarks", benchmarks, deprecated=False)
    if not name or "," in name:
        raise ConfigError(f"pass one benchmark with --benchmark/-b (got {name!r}), e.g. -b gsm8k")
    return name.strip()


@app.command()
def warmstart(families: Optional[list[str]] = typer.Argument(None, help="micro families (default: every one that "
                                                             "ships a checkpoint)"),
              verify: bool = typer.Option(False, "--verify", help="rebuild from scratch in a temporary folder and "
                                          "compare with the shipped checkpoint (weights' sha256, stop step, dev acc.)"),
              write: bool = typer.Option(False, "--write", help="warm-start here (the cached build is reused) and "
                                         "write it into corl_bench/micro/checkpoints/ (after changing a recipe)"),
              verbose: bool = typer.Option(False, "--verbose", "-v", help="log every stage (INFO)")) -> None:
    """The shipped micro checkpoints: list them, check that a rebuild on this machine matches them (--verify; exit 1
    when one differs: the shipped one stays in use), or rebuild and ship them (--write)."""
    import tempfile

    from corl_bench.micro import rebuild, shipped

    _setup_logging(verbose)
    say = Console() if Console().is_terminal else Console(width=160)
    if verify and write:
        _fail("pass --verify or --write, not both")
    try:
        names = list(families or rebuild.shipped_families())
        for f in names:
            rebuild.profile_for(f)  # an unknown family is a one-line error before anything is built
        if write:
            for f, path in rebuild.ship(names).items():
                man = shipped.manifest(f)
                say.print(f"{f}: wrote {path} ({man['steps']} warm-start steps, fingerprint {man['fingerprint']})",
                          highlight=False)
            return
        if verify:
            with tempfile.TemporaryDirectory(prefix="corl-bench-verify-") as tmp:
                say.print(f"rebuilding {', '.join(names)} from scratch (minutes per family) ...", highlight=False)
                results = rebuild.verify(names, Path(tmp))
            for f, r in results.items():
                same = r["same_weights"] and r["same_steps"]
                verdict = "matches the shipped checkpoint" if same else "DIFFERS from the shipped checkpoint (the " \
                    "shipped one stays in use)"
                say.print(f"{f}: {verdict}: stop step {r['steps'][0]} shipped / {r['steps'][1]} rebuilt, dev greedy "
                          f"{r['dev'][0]} / {r['dev'][1]}, weights sha256 {r['sha256'][0]} / {r['sha256'][1]}",
                          highlight=False)
            if not all(r["same_weights"] and r["same_steps"] for r in results.values()):
                raise typer.Exit(1)
            return
        for f in names:
            man = shipped.manifest(f)
            prof = rebuild.profile_for(f)
            current = prof.fingerprint(prof.family(f))
            state = "no shipped checkpoint (warm-started in the cache)" if man is None else (
                f"shipped, {man['steps']} warm-start steps, dev greedy {man['dev_checks'][-1][1]}, fingerprint "
                f"{man['fingerprint']}" + ("" if man["fingerprint"] == current else
                                           f" (STALE: the recipe's is {current}; corl-bench warmstart --write {f})"))
            say.print(f"{f}: {state}", highlight=False)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))


@app.command()
def ensemble(runs: list[str] = typer.Argument(..., help="RUN_DIR:agent RUN_DIR:agent, or one RUN_DIR with two agents"),
             benchmark: Optional[str] = typer.Option(None, "--benchmark", "-b", help="one benchmark; required"),
             benchmarks: Optional[str] = typer.Option(None, "--benchmarks", hidden=True, help="same as --benchmark"),
             phase: str = typer.Option("final", "--phase", help="base or final predictions of the runs"),
             per_model: int = typer.Option(4, "--per-model", help="samples pooled from each model (paper: 4)"),
             out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the scores to this JSON file"),
             json_out: Optional[Path] = typer.Option(None, "--json", hidden=True, help="deprecated: --out")) -> None:
    """Test-time ensemble control: maj@(2 x per-model) over the pooled samples of two models vs each model's own."""
    from dataclasses import asdict

    from corl_bench.report import probe as probe_cmd
    from corl_bench.results import write_json

    try:
        benchmark = _one_benchmark(benchmark, benchmarks)
        json_out = aliased("--out", out, "--json", json_out)
        scores, sources = probe_cmd.ensemble_from_runs(runs, benchmark, phase=phase, per_model=per_model)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    Console(width=None if Console().is_terminal else 160).print(probe_cmd.ensemble_table(scores))
    if json_out is not None:
        write_json(json_out, {**asdict(scores), "benchmark": benchmark, "phase": phase,
                              "sources": {s.label: str(s.path) for s in sources},
                              "decoding": {s.label: probe_cmd.recorded_decoding(s.path, benchmark) for s in sources}})
        Console().print(f"wrote {json_out}", highlight=False)


@app.command()
def report(results_dir: Path = typer.Argument(..., help="a sweep's output_dir or any results dir holding runs"),
           out: Optional[Path] = typer.Option(None, "--out", "-o", help="HTML file (default DIR/report.html)"),
           samples: int = typer.Option(3, "--samples", help="sample completions per run and agent (last logged step)"),
           verbose: bool = typer.Option(False, "--verbose", "-v", help="log every stage (INFO)")) -> None:
    """One self-contained HTML page: results table, gains over base, training dynamics and samples of every run."""
    from corl_bench.report.html import ReportError, build_report

    _setup_logging(verbose)
    try:
        path = build_report(results_dir, out, samples_per_agent=samples)
    except ReportError as e:
        _fail(str(e))
    console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)", highlight=False)


def passive_openmp_wait(environ: Any = None) -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` unless the environment chooses (it or ``GOMP_SPINCOUNT`` set): torch's OpenMP
    threads then sleep between parallel regions instead of spinning. On a CPU whose cores other processes share (a
    second run, a test suite), a spinning thread holds a core its sibling needs and every small matrix product waits
    at the barrier: on a 2-core machine at load 6 a 10 x 576 x 1536 product took 32 ms with the default policy and
    0.4-1.3 ms passive, and an hf run's evaluation with the defaults did not finish its first benchmark in 10
    minutes. The results do not change (the same threads do the same arithmetic). Must run before torch is imported
    (libgomp reads it when it loads); the CLI imports torch only inside its commands."""
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["OMP_WAIT_POLICY"] = "PASSIVE"


def main() -> None:
    passive_openmp_wait()
    app()


if __name__ == "__main__":
    sys.exit(main())
