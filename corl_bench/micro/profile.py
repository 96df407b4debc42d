"""The micro profile: where a run's models, training prompts and benchmarks come from when nothing can be downloaded.

The built-in families' warm-started checkpoints ship with the project (:mod:`corl_bench.micro.shipped`) and are read
from there (``model.micro_checkpoints=shipped``, the default). Any other family, a changed recipe, or
``model.micro_checkpoints=build`` is warm-started on this machine and cached under
``<cache>/micro-v<CACHE_VERSION>/<family>-<fingerprint>/`` as an ordinary ``save_pretrained`` folder; the fingerprint
hashes the family definition, so changing a family rebuilds it and two definitions never share a folder. Missing
checkpoints are warm-started in parallel, one single-threaded child process (``python -m corl_bench.micro.build``)
per family (single-threaded so the rebuild is bit-identical on the same machine), written to a temporary folder and
renamed into place, so an interrupted build never leaves a half checkpoint behind.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from corl_bench.config import ConfigError, ModelConfig
from corl_bench.rollout.request import Request
from corl_bench.micro.families import Family
from corl_bench.micro.tasks import SUITE_VERSION, Problem, problem_stream, test_suite
from corl_bench.micro.warmstart import render_prompt
from corl_bench.models.load import check_creatable as _check_creatable
from corl_bench.models.load import default_cache_root
from corl_bench.profile import Profile

log = logging.getLogger(__name__)
CACHE_VERSION = "1"

ProgressFn = Callable[[str, int, int], None]  # (family, done, total)


@dataclass(frozen=True)
class BenchItem:
    """One benchmark problem: id, the problem (for its views) and the gold answer."""

    id: str
    problem: Problem
    gold: str

    def prompt(self, view: str = "original") -> str:
        return render_prompt(self.problem.text(view))


def fingerprint(family: Any, suite: str = SUITE_VERSION) -> str:
    """Hash of a family definition, the version of the suites it is held out from, and the cache layout."""
    blob = json.dumps({"family": dataclasses.asdict(family), "suite": suite, "cache": CACHE_VERSION},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def _spawn_build(family: Family, target: Path) -> subprocess.Popen:
    """Warm-start one family in a child process (``python -m corl_bench.micro.build``), reporting on stdout."""
    payload = json.dumps(dataclasses.asdict(family))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "corl_bench.micro.build", "--target", str(target)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdin is not None
    proc.stdin.write(payload)
    proc.stdin.close()
    return proc


def _pump(family: str, proc: subprocess.Popen, progress: ProgressFn | None) -> None:
    """Forward ``PROGRESS done total`` lines of a build process to the progress callback."""
    assert proc.stdout is not None
    for line in proc.stdout:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "PROGRESS" and progress is not None:
            progress(family, int(parts[1]), int(parts[2]))


class MicroProfile(Profile):
    """Tiny models of different families and procedurally generated math (the embedded default); implements
    :class:`corl_bench.profile.Profile`."""

    name = "micro"
    images = False
    """its requests carry images (the micro-visual subclass); a family's kind must match"""

    def __init__(self, model_cfg: ModelConfig | None = None) -> None:
        cfg = model_cfg or ModelConfig()
        super().__init__(cfg)
        self.cache_root = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_root()
        self.dtype = cfg.dtype
        self.use_shipped = cfg.micro_checkpoints == "shipped"

    # ------------------------------------------------------------------ models
    def family(self, name: str) -> Family:
        from corl_bench.registries import FAMILIES

        try:
            return FAMILIES.get(name)
        except KeyError as e:
            raise ConfigError(str(e)) from None

    def fingerprint(self, family: Any) -> str:
        return fingerprint(family)

    def checkpoint_dir(self, family: str) -> Path:
        """The shipped checkpoint of ``family`` (:mod:`corl_bench.micro.shipped`) when one ships for its recipe and
        ``model.micro_checkpoints=shipped``; else its folder in the cache (warm-started there when missing)."""
        fam = self.family(family)
        if self.use_shipped:
            from corl_bench.micro import shipped

            found = shipped.find(fam.name, self.fingerprint(fam))
            if found is not None:
                return found
        return self.build_dir(family)

    def build_dir(self, family: str) -> Path:
        """Where this machine's warm start of ``family`` is cached."""
        fam = self.family(family)
        return self.cache_root / f"micro-v{CACHE_VERSION}" / f"{fam.name}-{self.fingerprint(fam)}"

    @classmethod
    def check_agent(cls, agent: Any) -> None:
        """The agent's family must be a registered micro family of this profile's kind (text or vision-language)."""
        from corl_bench.registries import FAMILIES, RegistryError

        try:
            fam = FAMILIES.get(agent.family)
        except RegistryError as e:
            raise ConfigError(f"cohort agent {agent.name!r} family: {e}") from None
        visual = getattr(fam, "kind", "") == "visual"
        if visual and not cls.images:
            raise ConfigError(f"cohort agent {agent.name!r}: {agent.family!r} is a vision-language family; run it "
                              "with model.profile=micro-visual (cohorts visual-single, visual-same-family, "
                              "visual-cross-family)")
        if cls.images and not visual:
            names = [n for n, f in FAMILIES.items() if getattr(f, "kind", "") == "visual"]
            raise ConfigError(f"cohort agent {agent.name!r}: {agent.family!r} is a text family; the {cls.name} "
                              f"profile trains vision-language families ({', '.join(names)})")
        if getattr(agent, "prompt", ""):
            raise ConfigError(f"cohort agent {agent.name!r}: prompt {agent.prompt!r} is an hf-profile option (the "
                              "micro profile has one format); leave prompt out")

    @classmethod
    def compute_weights(cls, cfg: Any) -> list[int | None]:
        """From each family's config: layers x (attention + MLP) + the tied head (vocabulary x width); None for a
        family whose config does not give the sizes."""
        from corl_bench.registries import FAMILIES

        out: list[int | None] = []
        for agent in cfg.cohort.agents:
            family = FAMILIES.get(agent.family)
            c = dict(getattr(family, "model_kwargs", ()) or ())
            h, layers, inter = c.get("hidden_size"), c.get("num_hidden_layers"), c.get("intermediate_size")
            vocab = getattr(family, "vocab_size", 0) or 800
            out.append(layers * (4 * h * h + 3 * h * inter) + vocab * h if h and layers and inter else None)
        return out

    def check_writable(self, models: Sequence[str]) -> None:
        """One-line ConfigError if checkpoints must be built and the cache cannot be created (nothing is written)."""
        if self.missing(models):
            _check_creatable(self.cache_root, "the micro model cache", "set model.cache_dir or $CORL_BENCH_CACHE to a "
                             "writable directory")

    def missing(self, models: Sequence[str]) -> list[str]:
        """The families (``models``) whose checkpoint is neither shipped nor cached."""
        return [f for f in dict.fromkeys(models) if not (self.checkpoint_dir(f) / "config.json").is_file()]

    def ensure_checkpoints(self, families: list[str], progress: ProgressFn | None = None) -> dict[str, Path]:
        """Warm-start every missing family (in parallel processes) and return family -> checkpoint dir."""
        todo = self.missing(families)
        if todo:
            try:
                (self.cache_root / f"micro-v{CACHE_VERSION}").mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"cannot create the micro model cache {self.cache_root} ({e.strerror}); "
                                  f"set model.cache_dir or $CORL_BENCH_CACHE to a writable directory") from None
            procs = {f: _spawn_build(self.family(f), self.checkpoint_dir(f)) for f in todo}
            threads = [threading.Thread(target=_pump, args=(f, p, progress), daemon=True) for f, p in procs.items()]
            for t in threads:
                t.start()
            failed = []
            for f, proc in procs.items():
                err = proc.stderr.read() if proc.stderr else ""
                if proc.wait() != 0:
                    last = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"]
                    failed.append(f"{f} ({last[0].strip()})")
            for t in threads:
                t.join()
            if failed:
                raise RuntimeError(f"warm start failed for {', '.join(failed)}; nothing was cached for it, rerun "
                                   f"to retry")
        return {f: self.checkpoint_dir(f) for f in families}

    def prepare(self, models: Sequence[str], progress: ProgressFn | None = None) -> dict[str, Path]:
        """:meth:`ensure_checkpoints` of the families ``models`` (the profile contract's name)."""
        return self.ensure_checkpoints(list(models), progress)

    def load(self, model: str, device: str | None = None) -> tuple[Any, Any]:
        """Load a cached checkpoint (model in eval mode on ``device``, left-padding tokenizer). Micro models are
        fp32 unless model.dtype=bfloat16 (``auto`` keeps fp32); ``device`` auto = a GPU when one is visible."""
        family = model
        model, tok = self.read_checkpoint(self.ensure_checkpoints([family])[family])
        if self.dtype == "bfloat16":
            import torch

            model = model.to(torch.bfloat16)
        if device is not None:
            from corl_bench.models.device import resolve_device

            where = resolve_device(device)
            if where != "cpu":
                model = model.to(where)
        model.eval()
        return model, tok

    @staticmethod
    def read_checkpoint(path: Path) -> tuple[Any, Any]:
        """(model, left-padding tokenizer) of a checkpoint folder this profile built."""
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast.from_pretrained(path)
        tok.padding_side = "left"
        return AutoModelForCausalLM.from_pretrained(path), tok

    # ------------------------------------------------------------------ data
    def training_problems(self, seed: int) -> Iterator[Problem]:
        """The unlabeled training stream; identical for every agent of a run (same data seed)."""
        return problem_stream(seed, prefix="train")

    def render(self, problem: Problem, view: str, model: str | None = None, prompt: str = "") -> Request:
        return Request(text=render_prompt(problem.text(view)))  # one prompt format for every micro family

    @classmethod
    def check_data(cls, cfg: Any) -> None:
        """The micro profile generates its problems: ``data.train`` belongs to the hf profile."""
        if cfg.data.train:
            raise ConfigError(f"data.train={cfg.data.train!r} is for the hf profile; the micro profile generates its "
                              "own problems (unset data.train; data.train_pool=N gives a finite set)")

    @classmethod
    def dev_benchmark(cls) -> str | None:
        """The labelled dev split that ``eval.select=dev`` / ``label-free`` decide on: ``micro-dev`` (200 problems,
        disjoint from micro-test and the training stream; never shown in tables)."""
        return "micro-dev"

    @classmethod
    def check_benchmark(cls, name: str, spec: Any) -> None:
        """Raise a one-line ConfigError unless this profile can evaluate benchmark ``name`` (``spec``: its
        :class:`corl_bench.eval.specs.BenchmarkSpec`; no data is read)."""
        if spec.profile != cls.name:
            from corl_bench.registries import BENCHMARKS

            ours = [b for b, s in BENCHMARKS.items() if s.profile == cls.name]
            raise ConfigError(f"eval.benchmarks: {name!r} is not a {cls.name} benchmark; the {cls.name} profile "
                              f"evaluates {' or '.join(ours)} (set eval.benchmarks=[{cls.name}-test])")

    def suite_items(self, suite: str) -> list[Any]:
        """The items of a generated suite."""
        return [BenchItem(p.id, p, p.answer) for p in test_suite(suite)]

    def benchmark(self, name: str) -> list[Any]:
        from corl_bench.registries import BENCHMARKS

        try:
            spec = BENCHMARKS.get(name)
        except KeyError as e:
            raise ConfigError(str(e)) from None
        self.check_benchmark(name, spec)
        return self.suite_items(spec.source.suite)
