"""The micro visual profile (``model.profile=micro-visual``): tiny vision-language models and procedurally drawn
scenes, the multimodal counterpart of the micro profile, on a CPU in minutes.

Everything is the micro profile's (cache layout, parallel single-threaded warm starts in child processes, atomic
checkpoint folders, seeded unlimited training stream, held-out suites, the checks) with the visual parts swapped in:
families from :mod:`corl_bench.micro.vl_families`, problems from :mod:`corl_bench.micro.visual`, checkpoints that
carry their vision codec, and requests that carry the scene's image (:func:`corl_bench.micro.vl_warmstart.request`).
Its benchmarks are ``micro-visual-test`` and the dev split ``micro-visual-dev``; a run with the default
``eval.benchmarks`` evaluates ``micro-visual-test``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from corl_bench.micro.profile import MicroProfile, fingerprint

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


class MicroVisualProfile(MicroProfile):
    """Tiny VLMs of different families and procedurally drawn scenes; implements :class:`corl_bench.profile.Profile`."""

    name = PROFILE
    images = True
    """its requests carry images: ``validate`` refuses a rollout engine without an image path, and its agents must
    be vision-language families"""

    def fingerprint(self, family: Any) -> str:
        from corl_bench.micro.visual import SUITE_VERSION

        return fingerprint(family, suite=f"visual-{SUITE_VERSION}")

    @staticmethod
    def read_checkpoint(path: Path) -> tuple[Any, Any]:
        """(VLM, left-padding tokenizer carrying the family's vision codec)."""
        from corl_bench.micro.vl_warmstart import load_checkpoint

        return load_checkpoint(path)

    # ------------------------------------------------------------------ data
    def training_problems(self, seed: int) -> Iterator[Any]:
        from corl_bench.micro.visual import visual_stream

        return visual_stream(seed, prefix="train")

    def render(self, problem: Any, view: str, model: str | None = None, prompt: str = "") -> Any:
        from corl_bench.micro.vl_warmstart import request

        return request(problem, view)  # one prompt format for every family; the codec places the image

    @classmethod
    def dev_benchmark(cls) -> str | None:
        return "micro-visual-dev"

    @classmethod
    def default_benchmarks(cls) -> tuple[str, ...]:
        """What a run evaluates when ``eval.benchmarks`` is not set."""
        return ("micro-visual-test",)

    def suite_items(self, suite: str) -> list[VisualItem]:
        from corl_bench.micro.visual import visual_suite

        return [VisualItem(p.id, p, p.answer) for p in visual_suite(suite)]
