"""``corl-bench``: run, validate, ls, table, eval, data prepare. Each command is a thin wrapper over a library function.

Heavy imports (torch, transformers) happen inside ``run`` only, so ``ls``, ``validate`` (until it checks the GRPO
loss name) and ``table`` start quickly.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from corl_bench.config import ConfigError, dump_config, load_config
from corl_bench.registry import RegistryError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark harness for label-free RL: Co-RL, TTRL, GT-Reward, ... on one GRPO core.")
console = Console(stderr=True)
KINDS = ("methods", "cohorts", "benchmarks", "families", "profiles")


def _fail(msg: str) -> None:
    console.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def _setup_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s",
                        handlers=[RichHandler(console=console, show_path=False)], force=True)
    for noisy in ("transformers", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR)


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
            if not (resume / "config.yaml").is_file():
                raise ConfigError(f"--resume {resume}: no config.yaml there; pass a run directory (results/runs/...)")
            config = config or resume / "config.yaml"
        cfg = load_config(config, _overrides(method, cohort, seed, steps, output_dir, run_id, set_))
        from corl_bench.runner import check_resumable, resolve, run as run_cell

        resolve(cfg)  # fail fast, before torch is imported and before anything is written
        if resume is not None:
            check_resumable(resume, resolve(cfg).config)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # weight-loading bars would break the run's progress display
        run_dir = run_cell(cfg, console=console, resume=resume, auto_resume=not fresh)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    except Exception as e:
        from corl_bench.agent import NumericalError
        from corl_bench.runner import ResourceError

        if isinstance(e, (ResourceError, NumericalError)):
            _fail(str(e))
        raise
    except KeyboardInterrupt:
        _fail("interrupted; the run directory keeps what was written so far (run.json status: failed)")
    console.print(f"run directory: {run_dir}")


@app.command()
def validate(config: Optional[Path] = typer.Argument(None, help="YAML config (default: built-in defaults)"),
             set_: list[str] = typer.Option([], "--set", "-s", help="override, e.g. --set grpo.lr=3e-5"),
             method: Optional[str] = typer.Option(None, "--method", "-m"),
             cohort: Optional[str] = typer.Option(None, "--cohort", "-c")) -> None:
    """Check a config without training: print the resolved config and the derived batch sizes."""
    try:
        cfg = load_config(config, _overrides(method, cohort, None, None, None, None, set_))
        from corl_bench.runner import resolve

        plan = resolve(cfg)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    cfg = plan.config
    k = cfg.rollout.samples_per_prompt
    n = plan.method_cls(plan.options, cfg.cohort.agents).generation_n(k)
    typer.echo(dump_config(cfg), nl=False)
    agents = len(cfg.cohort.agents)
    console.print(f"[green]valid.[/] {agents} agent(s); per step and agent: {cfg.rollout.prompts_per_step} prompts "
                  f"x {n} generated ({k} trained) = {cfg.rollout.prompts_per_step * k} trained completions; "
                  f"{cfg.run.steps} steps", highlight=False)


@app.command("ls")
def ls(kind: str = typer.Argument("methods", help="methods | cohorts | benchmarks | families | profiles")) -> None:
    """List what is registered (never imports torch)."""
    from rich.table import Table

    from corl_bench import registries

    if kind not in KINDS:
        _fail(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    try:
        reg = getattr(registries, kind.upper())
        table = Table(title=kind)
        if kind == "methods":
            for col in ("name", "agents", "extra cost", "uses labels", "reference"):
                table.add_column(col)
            for name, cls in reg.items():
                agents = f"{cls.min_agents}+" if cls.max_agents is None else str(cls.min_agents)
                table.add_row(name, agents, cls.extra_cost, "yes" if cls.uses_labels else "no", cls.reference)
        elif kind == "cohorts":
            for col in ("name", "profile", "agents (ring order)", "description"):
                table.add_column(col)
            for name, c in reg.items():
                agents = ", ".join(f"{a.name}" + (f" [{a.view}]" if a.view != "original" else "") for a in c.agents)
                table.add_row(name, c.profile, agents, c.description)
        elif kind == "benchmarks":
            for col in ("name", "version", "task", "k", "decoding", "extractor/grader", "data"):
                table.add_column(col)
            for name, spec in reg.items():
                dec, src = spec.get("decoding") or {}, spec.get("source") or {}
                decoding = (("greedy + " if dec.get("greedy") else "") + f"T={dec.get('temperature')} "
                            f"top-p={dec.get('top_p')} ≤{dec.get('max_new_tokens')} tok")
                data = src.get("local") or src.get("suite") or "-"
                table.add_row(name, str(spec.get("version")), str(spec.get("task")), str(dec.get("samples")),
                              decoding, f"{spec.get('extractor')}/{spec.get('grader')}", str(data))
        elif kind == "families":
            for col in ("name", "architecture", "tokenizer", "flaw (p_sys)"):
                table.add_column(col)
            for name, fam in reg.items():
                table.add_row(name, fam.arch.replace("Config", ""), fam.tokenizer, f"{fam.flaw} ({fam.p_sys})")
        else:
            table.add_column("name")
            for name in reg.names():
                table.add_row(name)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    Console().print(table)


@app.command()
def table(results_dir: Path = typer.Option(Path("results"), "--results-dir", "-r"),
          metrics: str = typer.Option("avg_k,greedy,maj_k", "--metrics", help="comma list of greedy, avg_k, maj_k, pass_k"),
          out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="where table.md/table.csv go (default: results dir)")) -> None:
    """Results of every run under results/, recomputed from stored predictions."""
    from corl_bench import table as table_mod

    chosen = tuple(m.strip() for m in metrics.split(",") if m.strip())
    bad = [m for m in chosen if m not in ("greedy", "avg_k", "maj_k", "pass_k")]
    if bad or not chosen:
        _fail(f"unknown metric(s) {', '.join(bad) or '(none)'}; valid: greedy, avg_k, maj_k, pass_k")
    table_mod.main(results_dir, metrics=chosen, out_dir=out_dir, console=Console())


@app.command()
def sweep(spec_path: Path = typer.Argument(..., help="sweep YAML: methods, cohorts, seeds, set, output_dir"),
          dry_run: bool = typer.Option(False, "--dry-run", help="list the cells and their status; run nothing"),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run a grid of methods x cohorts x seeds one cell after another; finished cells are skipped, interrupted
    ones resumed."""
    from corl_bench.sweep import cell_status, describe, load_sweep, plan, run_sweep

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
        result = run_sweep(spec, console=console)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("interrupted; run the same sweep again to resume it")
    for line in describe(result):
        console.print(line, highlight=False)
    if result["failed"]:
        raise typer.Exit(code=1)


@app.command("eval")
def eval_(target: str = typer.Argument(..., help="a run directory, a save_pretrained folder, 'smol' or a micro family"),
          benchmarks: str = typer.Option(..., "--benchmarks", "-b", help="comma list (corl-bench ls benchmarks)"),
          data_dir: Optional[str] = typer.Option(None, "--data-dir", help="local benchmark data (or $CORL_BENCH_DATA)"),
          out: Optional[Path] = typer.Option(None, "--out", help="for a model: results dir (default results/evals/<name>)"),
          phase: str = typer.Option("final", "--phase", help="for a run: final checkpoints or base models"),
          engine: str = typer.Option("ours", "--engine", help="ours | lm-eval"),
          seed: int = typer.Option(0, "--seed"),
          max_problems: Optional[int] = typer.Option(None, "--max-problems", help="first N problems (a stated subset)"),
          samples: Optional[int] = typer.Option(None, "--samples", help="override the spec's k"),
          max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="override the spec's cap"),
          code_timeout: float = typer.Option(10.0, "--code-timeout", help="CPU seconds per HumanEval/MBPP program"),
          workers: int = typer.Option(2, "--workers", help="sandboxed programs run at once"),
          chunk: int = typer.Option(32, "--chunk", help="problems per generation batch (x k samples); saved per chunk"),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Evaluate models on benchmark specs; per-sample predictions are kept and a re-run skips what exists."""
    from corl_bench.eval_cmd import run_eval

    _setup_logging(verbose)
    names = [b.strip() for b in benchmarks.split(",") if b.strip()]
    try:
        run_eval(target, names, data_dir=data_dir, phase=phase, out=out, seed=seed, max_problems=max_problems,
                 overrides={"samples": samples, "max_new_tokens": max_new_tokens}, engine=engine,
                 code_timeout=code_timeout, workers=workers, chunk=chunk, report=lambda line: Console().print(line, highlight=False))
    except (ConfigError, RegistryError) as e:
        _fail(str(e))


data_app = typer.Typer(no_args_is_help=True, help="Benchmark data: freeze to a local directory with checksums.")
app.add_typer(data_app, name="data")


@data_app.command("prepare")
def data_prepare(benchmarks: str = typer.Option(..., "--benchmarks", "-b", help="comma list"),
                 dest: Path = typer.Option(..., "--dest", help="directory to freeze the data into"),
                 data_dir: Optional[str] = typer.Option(None, "--data-dir", help="where to read from (else env/hub)")) -> None:
    """Freeze benchmarks to DEST in the local schema with sha256 checksums (then use --data-dir DEST)."""
    from corl_bench.benchspec import get_spec
    from corl_bench.data import prepare

    try:
        specs = [get_spec(b.strip()) for b in benchmarks.split(",") if b.strip()]
        manifest = prepare(specs, dest, data_dir)
    except (ConfigError, RegistryError) as e:
        _fail(str(e))
    for name, info in sorted(manifest["benchmarks"].items()):
        Console().print(f"{name}@{info['version']}: {info['rows']} rows -> {dest / info['file']}", highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
