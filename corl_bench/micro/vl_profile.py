"""The micro visual profile (``model.profile=micro-visual``): tiny vision-language models and procedurally drawn
scenes, the multimodal counterpart of the micro profile, on a CPU in minutes.

Everything is the micro profile's (cache layout, parallel single-threaded warm starts in child processes, atomic
checkpoint folders, seeded unlimited training stream, held-out suites) with the visual parts swapped in: families
from :mod:`corl_bench.micro.vl_families`, problems from :mod:`corl_bench.micro.visual`, and requests that carry the
scene's image (:func:`corl_bench.micro.vl_warmstart.request`). Its benchmarks are ``micro-visual-test`` and the dev
split ``micro-visual-dev``; a run with the default ``eval.benchmarks`` evaluates ``micro-visual-test``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from corl_bench.config import ConfigError
from corl_bench.micro.profile import CACHE_VERSION, MicroProfile
from corl_bench.micro.vl_families import is_visual

PROFILE = "micro-visual"


@dataclass(frozen=True)
class VisualItem:
    """One micro visual benchmark problem: id, the problem (its views and image) and the gold answer."""

    id: str
    problem: Any
    gold: str

    def prompt(self, view: str = "original") -> Any:
        from corl_bench.micro.vl_warmstart import request

        return request(self.problem, view)


def fingerprint(family: Any) -> str:
    from corl_bench.micro.visual import SUITE_VERSION

    blob = json.dumps({"family": dataclasses.asdict(family), "suite": f"visual-{SUITE_VERSION}",
                       "cache": CACHE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


class MicroVisualProfile(MicroProfile):
    """Tiny VLMs of different families and procedurally drawn scenes; implements :class:`corl_bench.profile.Profile`."""

    name = PROFILE
    images = True
    """its requests carry images: ``validate`` refuses a rollout engine without an image path"""

    def checkpoint_dir(self, family: str) -> Path:
        fam = self.family(family)
        return self.cache_root / f"micro-v{CACHE_VERSION}" / f"{fam.name}-{fingerprint(fam)}"

    @classmethod
    def check_agent(cls, agent: Any) -> None:
        """The agent's family must be a registered micro vision-language family."""
        from corl_bench.registries import FAMILIES, RegistryError

        try:
            fam = FAMILIES.get(agent.family)
        except RegistryError as e:
            raise ConfigError(f"cohort agent {agent.name!r} family: {e}") from None
        if not is_visual(fam):
            visual = [n for n, f in FAMILIES.items() if is_visual(f)]
            raise ConfigError(f"cohort agent {agent.name!r}: {agent.family!r} is a text family; the micro-visual "
                              f"profile trains vision-language families ({', '.join(visual)})")
        if getattr(agent, "prompt", ""):
            raise ConfigError(f"cohort agent {agent.name!r}: prompt {agent.prompt!r} is an hf-profile option; leave "
                              "prompt out")

    def load(self, family: str, device: str | None = None) -> tuple[Any, Any]:
        """(VLM in eval mode on ``device``, left-padding tokenizer carrying the family's vision codec)."""
        from corl_bench.micro.vl_warmstart import load_checkpoint

        model, tok = load_checkpoint(self.ensure_checkpoints([family])[family])
        if self.dtype == "bfloat16":
            import torch

            model = model.to(torch.bfloat16)
        if device is not None:
            from corl_bench.hf.device import resolve_device

            where = resolve_device(device)
            if where != "cpu":
                model = model.to(where)
        return model.eval(), tok

    # ------------------------------------------------------------------ data
    def training_problems(self, seed: int) -> Iterator[Any]:
        from corl_bench.micro.visual import visual_stream

        return visual_stream(seed, prefix="train")

    def render(self, problem: Any, view: str, model: str | None = None) -> Any:
        from corl_bench.micro.vl_warmstart import request

        return request(problem, view)  # one prompt format for every family; the codec places the image

    @classmethod
    def dev_benchmark(cls) -> str | None:
        return "micro-visual-dev"

    @classmethod
    def default_benchmarks(cls) -> tuple[str, ...]:
        """What a run evaluates when ``eval.benchmarks`` is left at its default."""
        return ("micro-visual-test",)

    @staticmethod
    def check_benchmark(name: str, spec: dict[str, Any]) -> None:
        if spec.get("profile") != PROFILE:
            from corl_bench.registries import BENCHMARKS

            ours = [b for b, s in BENCHMARKS.items() if s.get("profile") == PROFILE]
            raise ConfigError(f"eval.benchmarks: {name!r} is not a micro-visual benchmark; the micro-visual profile "
                              f"evaluates {' or '.join(ours)} (set eval.benchmarks=[micro-visual-test])")

    def benchmark(self, name: str) -> list[VisualItem]:
        from corl_bench.micro.visual import visual_suite
        from corl_bench.registries import BENCHMARKS

        try:
            spec = BENCHMARKS.get(name)
        except KeyError as e:
            raise ConfigError(str(e)) from None
        self.check_benchmark(name, spec)
        return [VisualItem(p.id, p, p.answer) for p in visual_suite(spec["source"]["suite"])]
