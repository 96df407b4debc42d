"""Format-reward control (Shao et al., "Spurious Rewards: Rethinking Training Signals in RLVR", arXiv 2506.10947):
reward 1 for a completion with a parsable ``\\boxed{}`` answer, whatever it says; else 0.

Follows ``ruixin31/Rethink_RLVR`` (``code/ttrl/verifier/auto_verify.py``, reward ``box_only_format`` ->
``code/ttrl/verifier/qwen/qwen_eval.py::box_only_format_reward_fn``): the reward is 1 iff
``qwen_math_parser.extract_answer_box_only`` finds a non-empty boxed answer. Like the random reward
(``random-reward``) it separates what a label-free signal adds from what RL updates that merely keep the answer
format do: on some models even this raises benchmark scores.

The check is :func:`corl_bench.method.has_boxed` (the project's extractor): the *last* ``\\boxed``/``\\fbox`` with
non-empty, balanced braces, or ``\\boxed 9`` (a space, then a token). Deviations from the reference parser, which
splits the text at the last ``boxed`` and reads braces with a counter: it also accepts an unclosed ``\\boxed{5``
(the content up to the end of the text), ``\\boxed9`` and any word ending in ``boxed``, and rejects ``\\fbox{}``; its
``strip_string`` clean-up could empty a box this check counts (e.g. ``\\boxed{\\text{ }}``). The paper's
``format`` reward (any extractable answer, not only a box) is not implemented; ``box_only_format`` is the one its
README lists. Every agent trains on its own rollouts.
"""

from __future__ import annotations

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, has_boxed


@METHODS.register("format-reward", aliases=("box-only-format",))
class FormatReward(Method):
    """Control: reward 1 for a parsable \\boxed{} answer, regardless of its content."""

    name = "format-reward"
    label = "Format reward"
    kind = "control"
    independent_agents = True
    table_order = 92
    min_agents = 1
    uses_labels = False
    extra_cost = "none"
    reference = ("control; spurious rewards, arXiv 2506.10947; ruixin31/Rethink_RLVR "
                 "code/ttrl/verifier/qwen/qwen_eval.py::box_only_format_reward_fn")

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        k, out = batch.samples_per_prompt, {}
        for name, ro in batch.rollouts.items():
            rewards = [[1.0 if has_boxed(text) else 0.0 for text in texts[:k]] for texts in ro.completions]
            flat = [r for row in rewards for r in row]
            out[name] = AgentRewards(rewards=rewards, metrics={"boxed_fraction": sum(flat) / max(1, len(flat))})
        return out
