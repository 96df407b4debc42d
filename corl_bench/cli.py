"""``corl-bench``: run, validate, ls, table, eval, data prepare. Each command is a thin wrapper over a library function.

Heavy imports (torch, transformers) happen inside ``run`` only, so ``ls``, ``validate`` (until it checks the GRPO
loss name) and ``table`` start quickly.
"""

from __future__ import annotations

import importlib.util

import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from corl_bench.config import ConfigError, dump_config, load_config
from corl_bench.registries import RegistryError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark harness for label-free RL: Co-RL, TTRL, GT-Reward, ... on one GRPO core.")
console = Console(stderr=True)
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


def _overrides(method: Optional[str], cohort: Optional[str], seed: Optional[int], steps: Optional[int],
               output_dir: Optional[str], run_id: Optional[str], sets: list[str]) -> list[str]:
    out = []
    for key, val in (("method.name", method), ("cohort.name", cohort), ("run.seed", seed), ("run.steps", steps),
                     ("run.output_dir", output_dir), ("run.run_id", run_id)):
        if val is not None:
            out.append(f"{key}={val}")
    return out + list(sets)


@app.command()
def run(method: Optional[str] = typer.Option(None, "--method", "-m", help="registered method (ls methods)"),
        cohort: Optional[str] = typer.Option(None, "--cohort", "-c", help="registered cohort (ls cohorts)"),
        config: Optional[Path] = typer.Option(None, "--config", help="YAML config; flags override it"),
        seed: Optional[int] = typer.Option(None, "--seed"),
        steps: Optional[int] = typer.Option(None, "--steps"),
        output_dir: Optional[str] = typer.Option(None, "--output-dir", help="default results/runs"),
        run_id: Optional[str] = typer.Option(None, "--run-id"),
        set_: list[str] = typer.Option([], "--set", "-s", help="override, e.g. --set grpo.lr=3e-5 (repeatable)"),
        resume: Optional[Path] = typer.Option(None, "--resume", help="continue this run directory from its last "
                                              "checkpoint (its config.yaml is the config)"),
        fresh: bool = typer.Option(False, "--fresh", help="never resume an interrupted run with the same config"),
        verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Train + evaluate one (method, cohort, seed) cell; writes results/runs/<run_id>/.

    An interrupted run with exactly the same config is resumed from its last checkpoint (--fresh: start anew)."""
    _setup_logging(verbose)
    try:
        if resume is not None:
            from corl_bench.results import RunDir

            if not RunDir(resume).config_path.is_file():
                raise ConfigError(f"--resume {resume}: no config.yaml there; pass a run directory (results/runs/...)")
            config = config or RunDir(resume).config_path
        cfg = load_config(config, _overrides(method, cohort, seed, steps, output_dir, run_id, set_))
        from corl_bench.train.runner import resolve, run as run_cell
        from corl_bench.train.resume import check_resumable

        resolve(cfg)  # fail fast, before torch is imported and before anything is written
        if resume is not None:
            check_resumable(resume, resolve(cfg).config)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # weight-loading bars would break the run's progress display
        run_dir = run_cell(cfg, console=console, resume=resume, auto_resume=not fresh)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    except Exception as e:
        from corl_bench.train.agent import NumericalError
        from corl_bench.train.session import ResourceError

        if isinstance(e, (ResourceError, NumericalError)):
            _fail(str(e))
        raise
    except KeyboardInterrupt:
        _fail("interrupted; the run directory keeps what was written so far (run.json status: failed)")
    console.print(f"run directory: {run_dir}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def validate(config: Optional[Path] = typer.Argument(None, help="YAML config (default: built-in defaults)"),
             config_opt: Optional[Path] = typer.Option(None, "--config", help="YAML config (as in run)"),
             set_: list[str] = typer.Option([], "--set", "-s", help="override, e.g. --set grpo.lr=3e-5"),
             method: Optional[str] = typer.Option(None, "--method", "-m"),
             cohort: Optional[str] = typer.Option(None, "--cohort", "-c"),
             elsewhere: bool = typer.Option(False, "--elsewhere", help="check the config for another machine: what "
                                            "this one lacks (a CUDA device, a data copy, a reachable hub) is a "
                                            "warning, not an error")) -> None:
    """Check a config without training: print the resolved config and the derived batch sizes (warnings, e.g. a
    hub model that will be downloaded, go to stderr). Refuses exactly what ``run`` would refuse before step 1."""
    _setup_logging(False)
    if config is not None and config_opt is not None and config != config_opt:
        _fail(f"two configs given ({config} and --config {config_opt}); pass one")
    config = config or config_opt
    try:
        cfg = load_config(config, _overrides(method, cohort, None, None, None, None, set_))
        from contextlib import nullcontext

        from corl_bench.config import checking_for_elsewhere
        from corl_bench.train.runner import resolve

        with checking_for_elsewhere() if elsewhere else nullcontext():
            plan = resolve(cfg)
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


@app.command("ls")
def ls(kind: str = typer.Argument("methods", help="methods | cohorts | benchmarks | families | profiles | engines")
       ) -> None:
    """List what is registered (never imports torch). Names are never cut: a table in a terminal wide enough for
    them, else (a pipe, a log, a narrow terminal) plain tab-separated rows under a header row."""
    from corl_bench import registries

    if kind not in KINDS:
        _fail(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    try:
        columns, rows = _LISTINGS[kind](getattr(registries, kind.upper()))
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    _print_listing(kind, columns, rows)


Listing = tuple[tuple[str, ...], list[tuple[str, ...]]]


def _list_methods(reg) -> Listing:
    rows = [(name, f"{cls.min_agents}+" if cls.max_agents is None else str(cls.min_agents), cls.extra_cost,
             "yes" if cls.uses_labels else "no", cls.reference) for name, cls in reg.items()]
    return ("name", "agents", "extra cost", "uses labels", "reference"), rows


def _list_cohorts(reg) -> Listing:
    rows = [(name, c.profile, ", ".join(a.name + (f" [{a.view}]" if a.view != "original" else "") for a in c.agents),
             c.description) for name, c in reg.items()]
    return ("name", "profile", "agents (ring order)", "description"), rows


def _list_benchmarks(reg) -> Listing:
    rows = []
    for name, spec in reg.items():  # BenchmarkSpec objects (corl_bench.eval.specs)
        dec, src = spec.decoding, spec.source
        decoding = (("greedy + " if dec.greedy else "") + f"T={dec.temperature} top-p={dec.top_p} "
                    f"≤{dec.max_new_tokens} tok")
        if dec.greedy and dec.samples == 0:
            decoding = f"greedy ≤{dec.max_new_tokens} tok"
        task = spec.task + ("+image" if spec.modality == "image" else "")
        rows.append((name, spec.version, task, str(dec.samples), decoding, f"{spec.extractor}/{spec.grader}",
                     str(src.local or src.suite or "-")))
    return ("name", "version", "task", "k", "decoding", "extractor/grader", "data"), rows


def _list_families(reg) -> Listing:
    """A family has a ``profile`` and an ``arch``; a micro family also a tokenizer kind and a flaw (a plugin's
    family need not)."""
    def flaw(fam: Any) -> str:
        return f"{fam.flaw} ({fam.p_sys})" if hasattr(fam, "flaw") else "-"

    rows = [(name, fam.profile, fam.arch.replace("Config", ""), str(getattr(fam, "tokenizer", "-")), flaw(fam))
            for name, fam in reg.items()]
    return ("name", "profile", "architecture", "tokenizer", "flaw (p_sys)"), rows


def _list_profiles(reg) -> Listing:
    return ("name",), [(name,) for name in reg.names()]


def _list_engines(reg) -> Listing:
    return ("name",), [(name,) for name in reg.names()]


_LISTINGS = {"methods": _list_methods, "cohorts": _list_cohorts, "benchmarks": _list_benchmarks,
             "families": _list_families, "profiles": _list_profiles, "engines": _list_engines}


def _print_listing(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A rich table whose name column is never cut, or plain tab-separated rows where it would not fit."""
    from rich.table import Table
    from rich.text import Text

    out = Console()
    if out.is_terminal and _table_fits(out.width, columns, rows):
        table = Table(title=title)
        table.add_column(columns[0], no_wrap=True, min_width=max(len(r[0]) for r in [columns, *rows]))
        for col in columns[1:]:
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))  # Text: "[rephrased]" is not markup
        out.print(table)
        return
    for row in (columns, *rows):
        typer.echo("\t".join(" ".join(cell.split()) for cell in row))


def _table_fits(width: int, columns: tuple[str, ...], rows: list[tuple[str, ...]], room: int = 10) -> bool:
    """Whether the whole name column plus ``room`` cells for each other column (less for a column whose longest
    word is shorter) fits: rich then wraps those columns and folds only words longer than the room they get."""
    from rich.cells import cell_len

    cols = list(zip(columns, *rows))
    words = [max(cell_len(w) for cell in col for w in cell.split() or [""]) for col in cols[1:]]
    need = max(cell_len(c) for c in cols[0]) + sum(min(w, room) for w in words) + 3 * len(cols) + 1
    return need <= width


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
          out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="where table.md/table.csv go (default: results dir)"),
          se: bool = typer.Option(False, "--se", help="show each cell's evaluation standard error (sd over problems "
                                  "/ sqrt(problems)) after mean ± sd; the CSV always has it"),
          show_warnings: bool = typer.Option(False, "--warnings", "-W", help="print every warning (default: one "
                                             "summary line), with the runs behind each environment difference")) -> None:
    """Paper-style results of your runs (results/runs, or -r DIR; a committed study with --study NAME), recomputed
    from stored predictions; Δ is each run's gain over its own base evaluation on the same problems."""
    from corl_bench.report import table as table_mod

    chosen = tuple(m.strip() for m in metrics.split(",") if m.strip())
    try:
        if study is not None and results_dir is not None:
            raise ValueError(f"give --study {study} or -r {results_dir}, not both (--study NAME is -r "
                             f"{table_mod.RESULTS_ROOT}/NAME)")
        where = (table_mod.study_dir(study) if study is not None else
                 results_dir if results_dir is not None else table_mod.RESULTS_ROOT / table_mod.RUNS_DIR)
        table_mod.main(where, metrics=chosen, out_dir=out_dir, fmt=fmt, out=out, reference=reference,
                       backbone=backbone, console=Console(), err_console=console, se=se, show_warnings=show_warnings)
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
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run a grid of methods x cohorts x seeds one cell after another; finished cells are skipped, interrupted
    ones resumed. Start it in several shells to run cells in parallel (each cell is claimed by one worker), or
    with --ray to run the cells as Ray tasks on a machine or a cluster."""
    from corl_bench.train.sweep import cell_status, describe, load_sweep, plan, run_sweep

    _setup_logging(verbose)
    try:
        spec = load_sweep(spec_path)
        if dry_run:
            cells, skipped = plan(spec)
            for cell in cells:
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
                           else None, cpus_per_cell=cpus_per_cell)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("interrupted; run the same sweep again to resume it")
    for line in describe(result):
        console.print(line, highlight=False)
    if result["failed"]:
        raise typer.Exit(code=1)


@app.command("eval")
def eval_(target: str = typer.Argument(..., help="a run directory (RUN_DIR:agent for one agent); a model folder "
                                        "(save_pretrained) or a hub id owner/name, optionally @revision (cached, "
                                        "else downloaded first), of any causal LM or vision-language model (an "
                                        "image-text-to-text checkpoint loads with its own processor); a model entry "
                                        "(smol, gemma3-270m); or a micro family"),
          benchmarks: str = typer.Option(..., "--benchmarks", "-b", help="comma list (corl-bench ls benchmarks)"),
          data_dir: Optional[str] = typer.Option(None, "--data-dir", help="local benchmark data (or $CORL_BENCH_DATA)"),
          out: Optional[Path] = typer.Option(None, "--out", help="for a model: results dir (default results/evals/<name>)"),
          phase: str = typer.Option("final", "--phase", help="for a run: final checkpoints or base models"),
          engine: str = typer.Option("ours", "--engine", help="ours | lm-eval | vlmevalkit (image benchmarks, "
                                     "through the VLMEvalKit bridge)"),
          seed: int = typer.Option(0, "--seed"),
          max_problems: Optional[int] = typer.Option(None, "--max-problems", help="first N problems (a stated subset)"),
          samples: Optional[int] = typer.Option(None, "--samples", help="override the spec's k"),
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
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Evaluate language and vision-language models on benchmark specs; per-sample predictions are kept and a re-run
    skips what exists. Image benchmarks (MathVision, MathVerse, MathVista, We-Math) need a vision-language model."""
    from corl_bench.eval.targets import run_eval

    _setup_logging(verbose)
    names = [b.strip() for b in benchmarks.split(",") if b.strip()]
    try:
        run_eval(target, names, data_dir=data_dir, phase=phase, out=out, seed=seed, max_problems=max_problems,
                 overrides={"samples": samples, "max_new_tokens": max_new_tokens}, engine=engine,
                 code_timeout=code_timeout, workers=workers, chunk=chunk, judge=judge, extractor=extractor,
                 max_image_side=max_image_side,
                 report=lambda line: Console().print(line, highlight=False))
    except (ConfigError, RegistryError) as e:
        _fail(str(e))


data_app = typer.Typer(no_args_is_help=True, help="Benchmark data: freeze to a local directory with checksums.")
app.add_typer(data_app, name="data")


@data_app.command("prepare")
def data_prepare(benchmarks: str = typer.Option(..., "--benchmarks", "-b", help="comma list"),
                 dest: Path = typer.Option(..., "--dest", help="directory to freeze the data into"),
                 data_dir: Optional[str] = typer.Option(None, "--data-dir", help="where to read from (else env/hub)")) -> None:
    """Freeze benchmarks to DEST in the local schema with sha256 checksums (then use --data-dir DEST)."""
    from corl_bench.eval.specs import get_spec
    from corl_bench.eval.data import prepare

    try:
        specs = [get_spec(b.strip()) for b in benchmarks.split(",") if b.strip()]
        manifest = prepare(specs, dest, data_dir)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    for name, info in sorted(manifest["benchmarks"].items()):
        Console().print(f"{name}@{info['version']}: {info['rows']} rows -> {dest / info['file']}", highlight=False)


@app.command()
def probe(models: list[str] = typer.Argument(..., help="2+ models: micro family, folder, smol, RUN_DIR[:agent], "
                                             "MODEL@SEED (seed-only partner); with --from-predictions: "
                                             "RUN_DIR[:agent], a predictions .jsonl or its folder"),
          benchmark: str = typer.Option(..., "--benchmark", "-b", help="one benchmark (corl-bench ls benchmarks)"),
          samples: int = typer.Option(1, "--samples", help="paired draws averaged (paper: 1)"),
          temperature: float = typer.Option(0.8, "--temperature", help="sampling temperature (paper: 0.8)"),
          greedy: bool = typer.Option(False, "--greedy", help="greedy decoding (stored: the greedy rows) instead"),
          max_problems: Optional[int] = typer.Option(None, "--max-problems", help="first N problems"),
          max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="override the spec's cap"),
          out: Optional[Path] = typer.Option(None, "--out", help="predictions + probe.json/probe.md (default "
                                             "results/probe/<benchmark>-<decoding>; reuse it to resume)"),
          seed: int = typer.Option(0, "--seed", help="sampling seed of models without @SEED"),
          phase: str = typer.Option("base", "--phase", help="for runs: base (pre-RL) or final"),
          from_predictions: bool = typer.Option(False, "--from-predictions", help="no generation: read stored "
                                                "predictions (sample_index 0.. of the sampled rows)"),
          data_dir: Optional[str] = typer.Option(None, "--data-dir", help="local benchmark data (or $CORL_BENCH_DATA)"),
          chunk: int = typer.Option(32, "--chunk", help="problems per generation batch; saved per chunk"),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Pre-RL error-overlap probe of every pair of models: Cohen's kappa on right/wrong, c (exactly one right),
    w (both wrong, same answer), u (at least one right), accuracies; writes probe.json + probe.md."""
    from corl_bench.report import probe as probe_cmd

    _setup_logging(verbose)
    say = Console() if Console().is_terminal else Console(width=160)  # a pipe or file gets whole rows
    try:
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


@app.command()
def warmstart(families: Optional[list[str]] = typer.Argument(None, help="micro families (default: every one that "
                                                             "ships a checkpoint)"),
              verify: bool = typer.Option(False, "--verify", help="rebuild from scratch in a temporary folder and "
                                          "compare with the shipped checkpoint (weights' sha256, stop step, dev acc.)"),
              write: bool = typer.Option(False, "--write", help="warm-start here (the cached build is reused) and "
                                         "write it into corl_bench/micro/checkpoints/ (after changing a recipe)"),
              verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
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
             benchmark: str = typer.Option(..., "--benchmark", "-b"),
             phase: str = typer.Option("final", "--phase", help="base or final predictions of the runs"),
             per_model: int = typer.Option(4, "--per-model", help="samples pooled from each model (paper: 4)"),
             json_out: Optional[Path] = typer.Option(None, "--json", help="write the scores to this JSON file")) -> None:
    """Test-time ensemble control: maj@(2 x per-model) over the pooled samples of two models vs each model's own."""
    from dataclasses import asdict

    from corl_bench.report import probe as probe_cmd
    from corl_bench.results import write_json

    try:
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
           verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
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
