"""The VLMEvalKit bridge: our specs -> VLMEvalKit dataset names, VLMEvalKit prediction records -> our prediction
rows (graded by the spec), the one-line error without the extra, and — where VLMEvalKit imports — that its API and
dataset names are the ones the bridge uses. VLMEvalKit does not import next to the CPU-only torch of this project's
environment: that test skips with the import's own one-line message."""

from __future__ import annotations

import sys

import pytest

from corl_bench.config import ConfigError
from corl_bench.eval.evaluator import row_grader
from corl_bench.eval.specs import get_spec
from corl_bench.eval.vlmevalkit_bridge import (DATASETS, MATHVERSE_VERSIONS, dataset_name, prediction_rows,
                                               require_vlmeval)
from corl_bench.eval.wemath import from_rows


def test_every_multimodal_spec_maps_to_a_vlmevalkit_dataset():
    assert DATASETS == {"mathvision": "MathVision", "mathvision_testmini": "MathVision_MINI",
                        "mathverse_testmini": "MathVerse_MINI", "mathvista_testmini": "MathVista_MINI",
                        "wemath_testmini": "WeMath"}
    for name in DATASETS:
        get_spec(name)  # every mapped name is a registered spec
    assert dataset_name("mathverse_testmini", "Vision Only") == "MathVerse_MINI_Vision_Only"
    for bad, args in (("gsm8k", ()), ("mathverse_testmini_text_only", ()), ("mathvision", ("Vision Only",))):
        with pytest.raises(ConfigError) as e:
            dataset_name(bad, *args)
        assert "\n" not in str(e.value)


def test_vlmevalkit_records_become_our_rows_graded_by_the_spec():
    spec = get_spec("wemath_testmini")
    nan = float("nan")
    records = [
        {"index": 0, "question": "OA = ?", "answer": "B", "prediction": "... \\boxed{B}", "A": "300", "B": "400",
         "C": "No correct answer", "D": nan, "ID": "2steps_1", "key": "2steps_1"},
        {"index": 1, "question": "AB = ?", "answer": "A", "prediction": "so \\boxed{300}", "A": "300", "B": "400",
         "C": nan, "ID": "2steps_1", "key": "2steps_2"},
        {"index": 2, "question": "OB = ?", "answer": "C", "prediction": nan, "A": "1", "B": "2", "C": "3",
         "ID": "2steps_1", "key": "2steps_multi"},
    ]
    rows = prediction_rows(spec, records, "WeMath")
    assert [r["problem_id"] for r in rows] == ["WeMath-0", "WeMath-1", "WeMath-2"]
    assert [r["correct"] for r in rows] == [True, True, False]        # letter; value of option A; no prediction
    assert rows[0]["choices"] == ["300", "400", "No correct answer"] and rows[1]["choices"] == ["300", "400"]
    assert rows[2]["completion"] == "" and rows[2]["extracted"] is None
    assert all(r["decoding"] == "greedy" and r["source"] == "vlmevalkit:WeMath" for r in rows)
    grade = row_grader(spec)
    assert [grade(r)[1] for r in rows] == [r["correct"] for r in rows]   # `corl-bench table` agrees
    assert from_rows(rows)["counts"]["IG"] == 1                           # sub right, multi wrong
    with pytest.raises(ConfigError, match="no index/prediction column"):
        prediction_rows(spec, [{"question": "q"}], "WeMath")


def test_without_the_extra_the_bridge_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "vlmeval", None)  # `import vlmeval` raises ImportError
    with pytest.raises(ConfigError) as e:
        require_vlmeval()
    msg = str(e.value)
    assert "\n" not in msg and "pip install -e '.[vlmevalkit]'" in msg and "does not import here" in msg


def vlmeval_or_skip():
    try:
        import vlmeval  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure is the skip reason
        pytest.skip(" ".join(f"{type(e).__name__}: {e}".split())[:300])
    return vlmeval


def test_vlmevalkit_knows_our_datasets_and_the_api_the_bridge_calls():
    vlmeval_or_skip()
    from vlmeval.dataset import SUPPORTED_DATASETS, build_dataset  # noqa: F401
    from vlmeval.inference import infer_data_job  # noqa: F401
    from vlmeval.smp import get_pred_file_path, load  # noqa: F401
    import vlmeval.vlm as vlm

    for name in [*DATASETS.values(), *MATHVERSE_VERSIONS.values()]:
        assert name in SUPPORTED_DATASETS, name
    assert hasattr(vlm, "Qwen2VLChat") and hasattr(vlm, "InternVLChat")
    assert get_pred_file_path("w", "m", "WeMath", use_env_format=False).endswith("m_WeMath.xlsx")
