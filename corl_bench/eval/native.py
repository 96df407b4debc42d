"""A model's own ("native") prompt for a benchmark: ``corl-bench eval --prompt native`` (``paper``, the default, is
the spec's ``prompt``: the paper's protocol).

The rule, decided from the models' cards and never by trying prompts on test items:

* **chat** — a model whose tokenizer carries a chat template (an instruction-tuned model: SmolLM2-135M-Instruct,
  Qwen2.5-Coder-Instruct) is asked zero-shot, in one user turn of its own template (with the default system turn the
  template adds itself), with a plain instruction of the field's zero-shot conventions for instruction-tuned models:
  math — reason step by step and end with ``The answer is: ...`` (the MetaMathQA answer line that SmolLM2's and
  Qwen2.5's instruction data carry; the paper's ``\\boxed{}`` instruction is Qwen's own documented math prompt,
  which the ``paper`` row already is); GPQA — OpenAI simple-evals' multiple-choice instruction (``Answer: X`` on the
  last line); HumanEval and MBPP — EvalPlus' chat prompt: its instruction (a self-contained script in a markdown
  code block) and its reply opening (a sentence and an open ```` ```python ```` fence the model continues; graded as
  opening + completion). Until 2026-12-06 the reply opening was missing: Qwen2.5-Coder-0.5B then opened its block
  with ```` ``` ```` and a line ``python`` on all 40 MBPP problems and 23 of 40 HumanEval (every such program failed
  on the name ``python``) — found in the real base table, fixed to EvalPlus' format, cells rerun.
* **completion** — a model without a chat template (a pretrained base model: Gemma-3-270M) continues plain text in
  the few-shot formats base models are evaluated with: GSM8K — the first four of Wei et al.'s chain-of-thought
  exemplars (hand-written, not GSM8K items) as ``Q: ... A: ... The answer is N.``; MATH-500, AIME, AMC — Minerva's
  four-shot ``Problem: ... Solution: ... Final Answer: The final answer is $X$. I hope it is correct.`` (MATH *train*
  problems; none is in MATH-500); GPQA — zero-shot (GPQA has no training split here): the question and options, then
  ``Answer:``, read as the first option letter written; HumanEval — the continuation the spec already asks (the
  paper's own base-model form: native and paper are the same there); MBPP — lm-eval's three-shot ``mbpp`` prompt
  (task ids 2, 3 and 4 of the prompt split, never test items).

Math answers of a native prompt are read with the ``qwen`` extractor (Minerva's final-answer line, the last
``\\boxed{}``, "the answer is", then the last number), GPQA's with ``letter`` (chat) or ``first_letter``
(completion); code runs in the sandbox as always. A native spec keeps the benchmark's name, so its predictions sit
in their own ``--out`` folder; its version carries ``+native-<style>`` and the manifest records the prompt, so paper
and native rows never mix.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from corl_bench.config import ConfigError
from corl_bench.eval.specs import BenchmarkSpec

PROMPTS = ("paper", "native")
STYLES = ("chat", "completion")

_MATH_BENCHMARKS = ("math500", "aime24", "aime25", "amc83", "amc23", "minerva_math", "olympiadbench", "math-dev")

CHAT_MATH = ("{problem}\n\nSolve the problem step by step. On the last line write the final answer as "
             "\"The answer is: <answer>\".")
CHAT_GPQA = ("Answer the following multiple choice question. The last line of your response should be of the "
             "following format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step "
             "before answering.\n\n{problem}")
CHAT_CODE = ("Please provide a self-contained Python script that solves the following problem in a markdown code "
             "block:\n```\n{problem}\n```\n")
CODE_RESPONSE = ("Below is a Python script with a self-contained function that solves the problem and passes "
                 "corresponding tests:\n```python\n")
"""EvalPlus' reply opening for chat models (its ``response_prefix`` and the open fence its ``make_raw_chat_prompt``
puts in the assistant turn): the model continues inside a python block"""

GSM8K_SHOTS = (
    ("There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, there "
     "will be 21 trees. How many trees did the grove workers plant today?",
     "There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have been "
     "21 - 15 = 6. The answer is 6."),
    ("If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?",
     "There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The answer is 5."),
    ("Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in total?",
     "Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 = 74. After eating 35, they "
     "had 74 - 35 = 39. The answer is 39."),
    ("Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops did Jason "
     "give to Denny?",
     "Jason started with 20 lollipops. Then he had 12 after giving some to Denny. So he gave Denny 20 - 12 = 8. The "
     "answer is 8."),
)
"""Wei et al. (2022), chain-of-thought exemplars 1-4 (the lm-eval ``gsm8k_cot`` prompt)."""

MINERVA_SHOTS = (
    ("Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.",
     "The expressions inside each square root must be non-negative. Therefore, $x-2 \\ge 0$, so $x\\ge2$, and "
     "$5 - x \\ge 0$, so $x \\le 5$. Also, the denominator cannot be equal to zero, so $5-x>0$, which gives $x<5$. "
     "Therefore, the domain of the expression is $\\boxed{[2,5)}$.\nFinal Answer: The final answer is $[2,5)$. I "
     "hope it is correct."),
    ("If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find $\\det (\\mathbf{A} \\mathbf{B}).$",
     "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det \\mathbf{B}) = (2)(12) = "
     "\\boxed{24}.$\nFinal Answer: The final answer is $24$. I hope it is correct."),
    ("Terrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound weights instead, how many times "
     "must Terrell lift them in order to lift the same total weight?",
     "If Terrell lifts two 20-pound weights 12 times, he lifts a total of $2\\cdot 12\\cdot20=480$ pounds of weight. "
     "If he lifts two 15-pound weights instead for $n$ times, he will lift a total of $2\\cdot15\\cdot n=30n$ pounds "
     "of weight.  Equating this to 480 pounds, we can solve for $n$:\n\\begin{align*}\n30n&=480\\\\\n"
     "\\Rightarrow\\qquad n&=480/30=\\boxed{16}\n\\end{align*}\nFinal Answer: The final answer is $16$. I hope it "
     "is correct."),
    ("If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\\\n6y-9x &=b.\n\\end{align*}has a solution "
     "$(x, y)$ where $x$ and $y$ are both nonzero, find $\\frac{a}{b},$ assuming $b$ is nonzero.",
     "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n$$6y-9x=-\\frac{3}{2}a.$$Since we also know "
     "that $6y-9x=b$, we have\n\n$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}{3}}.$$\nFinal Answer: "
     "The final answer is $-\\frac{2}{3}$. I hope it is correct."),
)
"""Minerva (Lewkowycz et al., 2022) four-shot MATH prompt (the lm-eval ``minerva_math`` prompt)."""

MBPP_SHOTS = (
    ("Write a function to find the similar elements from the given two tuple lists.",
     ("assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
      "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
      "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)"),
     "def similar_elements(test_tup1, test_tup2):\n  res = tuple(set(test_tup1) & set(test_tup2))\n  return (res) "),
    ("Write a python function to identify non-prime numbers.",
     ("assert is_not_prime(2) == False", "assert is_not_prime(10) == True", "assert is_not_prime(35) == True"),
     "import math\ndef is_not_prime(n):\n    result = False\n    for i in range(2,int(math.sqrt(n)) + 1):\n"
     "        if n % i == 0:\n            result = True\n    return result"),
    ("Write a function to find the largest integers from a given list of numbers using heap queue algorithm.",
     ("assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)==[85, 75, 65] ",
      "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],2)==[85, 75] ",
      "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],5)==[85, 75, 65, 58, 35]"),
     "import heapq as hq\ndef heap_queue_largest(nums,n):\n  largest_nums = hq.nlargest(n, nums)\n"
     "  return largest_nums"),
)
"""lm-eval ``mbpp``'s three shots: MBPP task ids 2, 3 and 4 (the prompt split) as ``mbpp/full.jsonl`` has them
(line ends ``\\n``)."""


def _braces(text: str) -> str:
    """``text`` safe inside a ``str.format`` template (the shots carry LaTeX braces)."""
    return text.replace("{", "{{").replace("}", "}}")


def style_of(tokenizer: Any) -> str:
    """``chat`` when the tokenizer carries a chat template (an instruction-tuned model), else ``completion``."""
    return "chat" if tokenizer is not None and getattr(tokenizer, "chat_template", None) else "completion"


def _completion(spec: BenchmarkSpec) -> dict[str, Any]:
    if spec.name == "gsm8k":
        shots = "".join(f"Q: {q}\nA: {a}\n\n" for q, a in GSM8K_SHOTS)
        return {"prompt": _braces(shots) + "Q: {problem}\nA:", "extractor": "qwen", "stop": ("\n\nQ:", "\n\n\n")}
    if spec.task == "math" or spec.name in _MATH_BENCHMARKS:
        shots = "".join(f"Problem:\n{q}\n\nSolution:\n{a}\n\n" for q, a in MINERVA_SHOTS)
        return {"prompt": _braces(shots) + "Problem:\n{problem}\n\nSolution:", "extractor": "qwen",
                "stop": ("\n\nProblem:", "\n\n\n")}
    if spec.task == "mcq":
        return {"prompt": "Question: {problem}\n\nAnswer:", "extractor": "first_letter", "stop": ("\n\n",)}
    if spec.name == "mbpp":
        shots = "".join("You are an expert Python programmer, and here is your task: " + text +
                        " Your code should pass these tests:\n\n" + "\n".join(tests) + "\n[BEGIN]\n" + code +
                        "\n[DONE]\n\n" for text, tests, code in MBPP_SHOTS)
        return {"prompt": _braces(shots) + spec.prompt, "extractor": spec.extractor, "stop": tuple(spec.decoding.stop)}
    if spec.name == "humaneval":
        return {"prompt": spec.prompt, "extractor": spec.extractor, "stop": tuple(spec.decoding.stop)}
    raise ConfigError(f"--prompt native: no native completion prompt for {spec.name}; use --prompt paper")


def _chat(spec: BenchmarkSpec) -> dict[str, Any]:
    if spec.task == "math":
        return {"prompt": CHAT_MATH, "extractor": "qwen", "stop": ()}
    if spec.task == "mcq":
        return {"prompt": CHAT_GPQA, "extractor": "letter", "stop": ()}
    if spec.name in ("humaneval", "mbpp"):
        return {"prompt": CHAT_CODE, "extractor": spec.extractor, "stop": (), "response_prefix": CODE_RESPONSE}
    raise ConfigError(f"--prompt native: no native chat prompt for {spec.name}; use --prompt paper")


def native_spec(spec: BenchmarkSpec, style: str) -> BenchmarkSpec:
    """``spec`` asked in a model's own format (``style``: :data:`STYLES`, see the module docstring): prompt, chat
    template, extractor and stop strings replaced, the version marked ``+native-<style>``; grader and data kept."""
    if style not in STYLES:
        raise ConfigError(f"native prompt style must be one of {', '.join(STYLES)} (got {style!r})")
    if spec.modality != "text" or spec.profile:
        raise ConfigError(f"--prompt native covers the text benchmarks with data; {spec.name} is asked with "
                          "--prompt paper")
    new = _chat(spec) if style == "chat" else _completion(spec)
    dec = dataclasses.replace(spec.decoding, stop=tuple(new["stop"]))
    reply = new.get("response_prefix", "")
    return dataclasses.replace(spec, version=f"{spec.version}+native-{style}" + ("+reply" if reply else ""),
                               prompt=new["prompt"], extractor=new["extractor"], chat_template=style == "chat",
                               system=None, fewshot=0, decoding=dec, response_prefix=reply)
