"""VLMEvalKit bridge: score a vision-language checkpoint on our multimodal specs with VLMEvalKit, and read its
predictions back as our prediction rows (so ``corl-bench table`` grades them with the spec's extractor and grader).

Optional extra ``vlmevalkit`` (``pip install -e '.[vlmevalkit]'``); VLMEvalKit is imported only when a function
here needs it, and its absence is one ConfigError line. Its API, as used here (open-compass/VLMEvalKit @ e8e78f0):
``vlmeval.dataset.build_dataset(name)``; a model class of ``vlmeval.vlm`` built with ``model_path=<checkpoint>``
(e.g. ``Qwen2VLChat``, ``InternVLChat`` with ``version="V2.0"``, ``Gemma3``) — what its ``run.py --config`` does for
a model entry with ``class``; ``vlmeval.inference.infer_data_job(model, work_dir, model_name, dataset)``, which writes
``<work_dir>/<model_name>_<dataset>.xlsx`` (``vlmeval.smp.get_pred_file_path``; ``$PRED_FORMAT`` may make it tsv or
json) with the dataset's columns plus ``prediction``; ``vlmeval.smp.load`` reads it back. VLMEvalKit's own scoring
of these sets (``dataset.evaluate``) asks a GPT judge (an OpenAI API) to extract answers; :func:`run_vlmevalkit`
calls it only when asked (``own_eval=True``), and our rows are always graded by our rules.

Our specs -> VLMEvalKit datasets (:data:`DATASETS`): mathvision -> MathVision, mathvision_testmini ->
MathVision_MINI, mathverse_testmini -> MathVerse_MINI (the vision versions, 3940), mathvista_testmini ->
MathVista_MINI, wemath_testmini -> WeMath. VLMEvalKit's rows and prompts are its own (its ``index`` is the problem
id, prefixed with the dataset name; its question wording is not the paper's boxed prompt), so bridge rows are a
different protocol from ours: they are written with ``decoding: greedy`` and ``source: vlmevalkit:<dataset>``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from corl_bench.config import ConfigError
from corl_bench.eval.specs import BenchmarkSpec

log = logging.getLogger(__name__)

DATASETS: dict[str, str] = {
    "mathvision": "MathVision", "mathvision_testmini": "MathVision_MINI", "mathverse_testmini": "MathVerse_MINI",
    "mathvista_testmini": "MathVista_MINI", "wemath_testmini": "WeMath",
}
"""Our multimodal spec -> the VLMEvalKit dataset name."""
MATHVERSE_VERSIONS: dict[str, str] = {
    "Text Dominant": "MathVerse_MINI_Text_Dominant", "Text Lite": "MathVerse_MINI_Text_Lite",
    "Vision Intensive": "MathVerse_MINI_Vision_Intensive", "Vision Dominant": "MathVerse_MINI_Vision_Dominant",
    "Vision Only": "MathVerse_MINI_Vision_Only",
}
"""One MathVerse version -> its VLMEvalKit dataset (``MathVerse_MINI`` holds all five)."""
INSTALL = "pip install -e '.[vlmevalkit]' (VLMEvalKit needs its own torch/torchvision build)"
MODEL_CLASSES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2_vl": ("Qwen2VLChat", {}), "qwen2_5_vl": ("Qwen2VLChat", {}),
    "internvl_chat": ("InternVLChat", {"version": "V2.0"}), "gemma3": ("Gemma3", {}),
}
"""A checkpoint's ``model_type`` -> the ``vlmeval.vlm`` class (and arguments) that loads it, for ``corl-bench eval
--engine vlmevalkit``. VLMEvalKit's ``InternVLChat`` loads the original InternVL layout (``internvl_chat``, remote
code), not transformers' ``internvl`` one; its ``Qwen2VLChat`` picks the Qwen2.5-VL class only when the path names
``2.5`` / ``2_5`` (:func:`model_path` links such a checkpoint under a name that does)."""


def require_vlmeval() -> Any:
    """The ``vlmeval`` package, or a one-line ConfigError naming the extra (and why the import failed)."""
    try:
        import vlmeval
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken torchvision/torch pairing at import time
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(f"the VLMEvalKit bridge needs VLMEvalKit, which does not import here ({type(e).__name__}: "
                          f"{first}); {INSTALL}") from None
    return vlmeval


def dataset_name(spec: BenchmarkSpec | str, version: str | None = None) -> str:
    """The VLMEvalKit dataset of one of our specs (``version``: one MathVerse version's dataset); one-line
    ConfigError for a spec it has no counterpart of."""
    name = spec if isinstance(spec, str) else spec.name
    if name not in DATASETS:
        raise ConfigError(f"benchmark {name} has no VLMEvalKit counterpart; the bridge covers "
                          f"{', '.join(DATASETS)}")
    if version is None:
        return DATASETS[name]
    if name != "mathverse_testmini" or version not in MATHVERSE_VERSIONS:
        raise ConfigError(f"benchmark {name}: no VLMEvalKit dataset for version {version!r}; versions exist for "
                          f"mathverse_testmini only: {', '.join(MATHVERSE_VERSIONS)}")
    return MATHVERSE_VERSIONS[version]


def _model_type(folder: Path) -> Any:
    import json

    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def model_class(folder: Path | str) -> tuple[str, dict[str, Any]]:
    """The ``vlmeval.vlm`` class name and its arguments for a ``save_pretrained`` folder (:data:`MODEL_CLASSES`);
    a one-line ConfigError for a folder whose model type has none. Reads config.json only."""
    model_type = _model_type(Path(folder))
    if model_type not in MODEL_CLASSES:
        raise ConfigError(f"{folder}: no VLMEvalKit model class is known for model type {model_type!r}; the bridge "
                          f"takes {', '.join(MODEL_CLASSES)} checkpoints (evaluate others with --engine ours)")
    name, kwargs = MODEL_CLASSES[model_type]
    return name, dict(kwargs)


def model_path(folder: Path | str, work_dir: Path) -> str:
    """The path VLMEvalKit is given for ``folder``: the folder itself, or for a Qwen2.5-VL checkpoint whose path does
    not say so, a link ``<work_dir>/<name>-qwen2_5_vl`` to it (``Qwen2VLChat`` chooses its model class by the path)."""
    folder = Path(folder)
    if _model_type(folder) != "qwen2_5_vl" or any(m in str(folder).lower() for m in ("2.5", "2_5", "qwen25")):
        return str(folder)
    link = Path(work_dir) / f"{folder.name}-qwen2_5_vl"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(folder.resolve(), target_is_directory=True)
    return str(link)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == ""


def prediction_rows(spec: BenchmarkSpec, records: Iterable[Mapping[str, Any]], dataset: str) -> list[dict[str, Any]]:
    """VLMEvalKit prediction records (its result file's rows: ``index``, ``question``, ``answer``, ``prediction``,
    MCQ option columns ``A`` .. ``J``, We-Math's ``ID`` / ``key``) -> our prediction rows, graded by the spec."""
    from corl_bench.eval.scoring import LETTERS, grade_text

    rows = []
    for rec in records:
        if "prediction" not in rec or "index" not in rec:
            raise ConfigError(f"VLMEvalKit result for {dataset} has no index/prediction column; pass the file "
                              "infer_data_job wrote (<work_dir>/<model>_<dataset>.xlsx)")
        options = [str(rec[c]) for c in LETTERS if c in rec and not _blank(rec[c])]
        gold = "" if _blank(rec.get("answer")) else str(rec["answer"]).strip()
        completion = "" if _blank(rec["prediction"]) else str(rec["prediction"])
        extracted, correct = grade_text(completion, gold, spec.extractor, spec.grader, options or None)
        row: dict[str, Any] = {
            "benchmark": spec.name, "benchmark_version": spec.version, "problem_id": f"{dataset}-{rec['index']}",
            "decoding": "greedy", "sample_index": 0, "prompt": "" if _blank(rec.get("question")) else
            str(rec["question"]), "completion": completion, "extracted": extracted, "gold": gold, "correct": correct,
            "finished": True, "n_tokens": None, "source": f"vlmevalkit:{dataset}", "extractor": spec.extractor}
        if options:
            row["choices"] = options
        if not _blank(rec.get("ID")) and not _blank(rec.get("key")):
            row["meta"] = {"we_math_id": str(rec["ID"]), "key": str(rec["key"])}
        rows.append(row)
    return rows


def run_vlmevalkit(model_class: str, model_path: str, benchmarks: Sequence[str], work_dir: Path, *,
                   out_dir: Path | None = None, model_name: str | None = None, own_eval: bool = False,
                   model_kwargs: Mapping[str, Any] | None = None, judge_kwargs: Mapping[str, Any] | None = None
                   ) -> dict[str, Any]:
    """Generate with VLMEvalKit for each of our ``benchmarks`` and write our rows to ``out_dir/<benchmark>.jsonl``
    (default ``work_dir``); returns benchmark -> our scores (and VLMEvalKit's own, with ``own_eval``).

    ``model_class``: a class of ``vlmeval.vlm`` (``Qwen2VLChat``, ``InternVLChat``, ...), built with
    ``model_path=model_path`` and ``model_kwargs``. Every name is checked before VLMEvalKit loads anything."""
    from corl_bench.eval.evaluator import row_grader
    from corl_bench.eval.metrics import score_predictions
    from corl_bench.eval.specs import get_spec
    from corl_bench.results import atomic_write_text
    import json

    specs = [get_spec(b) for b in benchmarks]
    names = [dataset_name(s) for s in specs]
    vlmeval = require_vlmeval()
    import vlmeval.vlm as vlm
    from vlmeval.dataset import build_dataset
    from vlmeval.inference import infer_data_job
    from vlmeval.smp import get_pred_file_path, load

    cls = getattr(vlm, model_class, None)
    if cls is None:
        raise ConfigError(f"VLMEvalKit {getattr(vlmeval, '__version__', '')} has no model class {model_class!r} in "
                          "vlmeval.vlm (e.g. Qwen2VLChat, InternVLChat, Gemma3)")
    model_name = model_name or Path(model_path).name or model_class
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    out_dir = Path(out_dir or work_dir)
    model = cls(model_path=model_path, **dict(model_kwargs or {}))
    results: dict[str, Any] = {}
    for spec, name in zip(specs, names):
        dataset = build_dataset(name)
        if dataset is None:
            raise ConfigError(f"VLMEvalKit could not build dataset {name} (its data download failed?)")
        model = infer_data_job(model, work_dir=str(work_dir), model_name=model_name, dataset=dataset)
        pred_file = get_pred_file_path(str(work_dir), model_name, name)
        rows = prediction_rows(spec, load(pred_file).to_dict("records"), name)
        out = out_dir / f"{spec.name}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows))
        results[spec.name] = {"file": str(out), "vlmevalkit_file": pred_file,
                              "ours": score_predictions(rows, row_grader(spec)).metrics()}
        if own_eval:
            results[spec.name]["vlmevalkit"] = dataset.evaluate(pred_file, **dict(judge_kwargs or {}))
        log.info("VLMEvalKit %s -> %s: %d rows", name, out, len(rows))
    return results
