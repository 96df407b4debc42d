"""The field's 2026 label rules on hand-worked rollouts (issue 42): RLCCF's collective vote, SCRL's selective
positives and entropy-gated negatives, its margin gate on TTRL and Co-RL, DCRL's harmonic (dual-consensus) vote."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from corl_bench.config import ConfigError
from corl_bench.method import RewardInput, SequenceStats, harmonic_vote, vote_margin
from corl_bench.registries import METHODS
from tests.test_methods_on_cpu import agents, batch, make, ro


# ------------------------------------------------------------------------------------------------ the vote helpers
@pytest.mark.parametrize("answers, margin", [
    (["1", "1", "2", None], 0.25),  # shares over all four, None included: 0.5 - 0.25
    (["1", "1", "2", "2"], 0.0),  # a tie at the top
    (["3", "3", "3"], 1.0),  # one distinct answer: its share
    (["3", None, None, None], 0.25),
    ([None, None], 0.0), ([], 0.0),
])
def test_vote_margin_is_top_share_minus_second_over_all_answers(answers, margin):
    assert vote_margin(answers) == pytest.approx(margin)


def test_harmonic_vote_needs_an_answer_in_both_pools_and_takes_the_best_harmonic_mean():
    # anchor shares: 5 -> 3/4, 6 -> 1/4; explorer: 6 -> 2/4, 5 -> 1/4 (None counts in the denominator)
    # hm(5) = 2*.75*.25/(1.0) = 0.375; hm(6) = 2*.25*.5/.75 = 0.3333
    assert harmonic_vote(["5", "5", "5", "6"], ["6", "6", "5", None]) == "5"
    # explorer: 6 -> 3/4, 5 -> 1/4: hm(6) = 2*.25*.75/1 = 0.375 > hm(5) = 2*.75*.25/1 = 0.375 tie -> anchor's first
    assert harmonic_vote(["5", "5", "5", "6"], ["6", "6", "6", "5"]) == "5"
    assert harmonic_vote(["5", "5", "6", "6"], ["6", "6", "6", "5"]) == "6"  # hm(6)=.6 > hm(5)=.333
    assert harmonic_vote(["1", "1"], ["2", None]) is None  # nothing in both pools: the caller falls back
    assert harmonic_vote([None], ["1"]) is None and harmonic_vote([], ["1"]) is None


# ------------------------------------------------------------------------------------------------ RLCCF
THREE = {"a0": [["2", "2", "2", "2"]],  # vote 2, self-consistency 1.0
         "a1": [["4", "4", "6", None]],  # vote 4, 0.5
         "a2": [["4", "9", "8", "7"]]}  # vote 4 (first of a four-way tie), 0.25


def test_rlccf_weights_every_agents_vote_by_its_self_consistency_self_included():
    out = make("rlccf", 3).rewards(batch(THREE, k=4))
    # collective weights: 2 -> 1.0 (a0), 4 -> 0.5 + 0.25 = 0.75: every agent is labelled 2
    assert {a: r.pseudo_labels for a, r in out.items()} == {"a0": ["2"], "a1": ["2"], "a2": ["2"]}
    assert out["a0"].rewards == [[1.0] * 4] and out["a1"].rewards == [[0.0] * 4]
    assert make("rlccf", 3).teachers() == {a: ["a0", "a1", "a2"] for a in ("a0", "a1", "a2")}


def test_rlccf_uniform_weights_is_the_collective_plurality():
    out = make("rlccf", 3, vote_weight="uniform").rewards(batch(THREE, k=4))
    assert out["a0"].pseudo_labels == ["4"] and out["a0"].rewards == [[0.0] * 4]  # two votes for 4, one for 2
    assert out["a1"].rewards == [[1.0, 1.0, 0.0, 0.0]]


def test_rlccf_is_one_option_away_from_corl_peer_majority():
    b = batch(THREE, k=4)
    peer = make("corl-peer-majority", 3).rewards(b)
    # strict majority of the *other* agents' votes, unweighted: a0's peers both say 4; a1's and a2's peers split
    assert [peer[a].pseudo_labels[0] for a in ("a0", "a1", "a2")] == ["4", None, None]
    collective = make("corl-peer-majority", 3, supervision="collective").rewards(b)
    rlccf = make("rlccf", 3).rewards(b)
    assert {a: (r.rewards, r.pseudo_labels) for a, r in collective.items()} == \
        {a: (r.rewards, r.pseudo_labels) for a, r in rlccf.items()}


def test_rlccf_ties_go_to_the_earliest_agent_and_no_votes_leave_the_prompt_unlabeled():
    m = make("rlccf", 2)
    out = m.rewards(batch({"a0": [["1", "1", "3", "4"], [None, None]], "a1": [["7", "7", "5", "6"], [None, None]]},
                          k=2))
    assert out["a1"].pseudo_labels == ["1", None]  # 0.5 vs 0.5: a0 votes first
    assert out["a1"].rewards == [[0.0, 0.0], [0.0, 0.0]] and out["a0"].rewards[0] == [1.0, 1.0]


def test_rlccf_is_marked_unofficial_in_listings_and_tables():
    cls = METHODS.get("rlccf")
    assert cls.official is False and cls.row_label("cross-family") == "RLCCF†"
    assert METHODS.get("scrl").official and METHODS.get("scrl").row_label("single") == "SCRL"
    listing = subprocess.run([sys.executable, "-m", "corl_bench", "ls", "methods"], capture_output=True, text=True,
                             check=True).stdout
    assert any(line.startswith("rlccf") and "\tunofficial\t" in line for line in listing.splitlines()), listing
    from corl_bench.report.methods import unofficial_labels
    assert unofficial_labels({"rlccf", "corl", "ttrl"}) == ["RLCCF"]


# ------------------------------------------------------------------------------------------------ the margin gate
def test_ttrl_margin_gate_leaves_prompts_without_a_clear_majority_unlabeled():
    b = batch({"a0": [["1", "1", "2", None], ["1", "1", "1", "2", "2"][:4], ["1", "1", "1", "2", "2"]]}, k=4)
    plain = make("ttrl", 1).rewards(b)["a0"]
    assert plain.pseudo_labels == ["1", "1", "1"]
    gated = make("ttrl", 1, margin=0.15).rewards(b)["a0"]
    # margins: .5-.25 = .25 > .15 labelled; 3/4-1/4 = .5 labelled; 3/5-2/5 = .2 > .15 labelled
    assert gated.pseudo_labels == ["1", "1", "1"]
    strict = make("ttrl", 1, margin=0.2).rewards(b)["a0"]  # the gate is strict: a margin of exactly .2 fails
    assert strict.pseudo_labels == ["1", "1", None] and strict.rewards[2] == [0.0] * 4
    tie = make("ttrl", 1, margin=0.0).rewards(batch({"a0": [["1", "2"]]}, k=2))["a0"]
    assert tie.pseudo_labels == [None]
    with pytest.raises(ConfigError, match="margin must be in"):
        METHODS.get("ttrl").parse_options({"margin": 1.5})


def test_corl_margin_gate_applies_to_the_peers_vote():
    b = batch({"a0": [["3", "3", "3", "3"]], "a1": [["5", "5", "6", "6"]]}, k=4)
    out = make("corl", 2, margin=0.15).rewards(b)
    assert out["a0"].pseudo_labels == [None] and out["a0"].rewards == [[0.0] * 4]  # a1's vote is a tie
    assert out["a1"].pseudo_labels == ["3"]  # a0's vote is clear
    assert make("corl", 2).rewards(b)["a0"].pseudo_labels == ["5"]  # no gate: the tie goes to the first seen


# ------------------------------------------------------------------------------------------------ dual consensus
def test_corl_dual_consensus_labels_what_both_peers_support_else_the_peers_vote():
    b = batch({"a0": [["5", "5", "6", "6"], ["1", "1", "1", "1"]],
               "a1": [["6", "6", "6", "5"], ["2", "2", "2", "2"]]}, k=4)
    ring = make("corl", 2).rewards(b)
    dual = make("corl", 2, supervision="dual-consensus").rewards(b)
    # prompt 0: a0 learns from anchor a1 (6: 3/4, 5: 1/4) and its own pool (5: 1/2, 6: 1/2): hm(6)=.6 > hm(5)=.333
    # a1 learns from anchor a0 (5 first) and its own pool: the same 6; prompt 1: nothing in both -> the peer's vote
    assert ring["a1"].pseudo_labels == ["5", "1"]
    assert dual["a1"].pseudo_labels == ["6", "1"] and dual["a0"].pseudo_labels == ["6", "2"]
    assert dual["a1"].rewards == [[1.0, 1.0, 1.0, 0.0], [0.0] * 4]


# ------------------------------------------------------------------------------------------------ SCRL
def scrl_batch(answers: list[list[str | None]], entropy: list[list[float]]) -> RewardInput:
    k = len(answers[0])
    return RewardInput(step=0, problem_ids=[f"p{i}" for i in range(len(answers))], rollouts={"a0": ro("a0", answers)},
                       samples_per_prompt=k,
                       stats={"a0": SequenceStats(entropy=entropy, self_certainty=[[0.0] * k for _ in answers])})


def test_scrl_binary_positive_negatives_and_no_answer():
    # 8 rollouts: 7 x5 (share .625), 3 x1 (.125, entropy 2.0), 4 x1 (.125, entropy 0.1), one without an answer
    answers = [["7", "7", "7", "7", "7", "3", "4", None]]
    entropy = [[0.5, 0.5, 0.5, 0.5, 0.5, 2.0, 0.1, 1.0]]  # prompt mean 0.7
    out = make("scrl", 1).rewards(scrl_batch(answers, entropy))["a0"]
    # positive 7 (.625 >= .5, margin .5 > .15); 3 rare and uncertain (2.0 >= .7) -> negative; 4 rare but confident
    assert out.pseudo_labels == ["7"]
    assert out.rewards == [[1.0] * 5 + [-1.0, 0.0, -1.0]]
    assert out.metrics["negative_fraction"] == pytest.approx(1 / 8) and out.metrics["labeled_fraction"] == 1.0


def test_scrl_no_clear_majority_keeps_the_negatives_only():
    answers = [["7", "7", "7", "8", "8", "8", "9", "1"]]  # 7 and 8 at .375: below tau_pos and a tie
    entropy = [[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 0.0]]  # mean 1.125: 9 (3.0) is a negative, 1 (0.0) is not
    out = make("scrl", 1).rewards(scrl_batch(answers, entropy))["a0"]
    assert out.pseudo_labels == [None] and out.rewards == [[0.0] * 6 + [-1.0, 0.0]]
    # the paper's run script thresholds: tau_pos .375 but the margin (0) still fails
    assert make("scrl", 1, tau_pos=0.375, tau_marg=0.125).rewards(scrl_batch(answers, entropy))["a0"].pseudo_labels \
        == [None]


def test_scrl_continuous_rewards_follow_share_and_class_entropy():
    answers = [["7", "7", "7", "3"]]
    entropy = [[1.0, 1.0, 1.0, 3.0]]  # Hbar 1.5; Hc(7) = 1.0, Hc(3) = 3.0; shares .75 / .25
    m = make("scrl", 1, reward_mode="continuous", tau_low=0.3, lambda_h=0.1)
    out = m.rewards(scrl_batch(answers, entropy))["a0"]
    pos = 1.0 * 0.75 - 0.1 * (1.0 - 1.5)  # 0.8
    neg = -1.0 * (0.3 - 0.25) - 0.1 * (3.0 - 1.5)  # -0.2
    assert out.rewards == [[pytest.approx(pos)] * 3 + [pytest.approx(neg)]]
    with pytest.raises(ConfigError, match="reward_mode must be one of"):
        METHODS.get("scrl").parse_options({"reward_mode": "soft"})


def test_scrl_needs_the_trainers_entropies():
    with pytest.raises(RuntimeError, match="entropies"):
        make("scrl", 1).rewards(batch({"a0": [["1"]]}, k=1))
    assert METHODS.get("scrl")(METHODS.get("scrl").parse_options({}), agents(2)).teachers() == {"a0": ["a0"],
                                                                                               "a1": ["a1"]}


# ------------------------------------------------------------------------------------------------ peer likelihood
class Scorer:
    """Test double of RewardInput.likelihood: a peer's score of a text is minus its length (the real scoring forward
    is tested on real models below); records what each peer was asked."""

    def __init__(self) -> None:
        self.asked: dict[str, tuple[list, list[str]]] = {}

    def __call__(self, requests, texts):
        self.asked = {a: (list(requests[a]), list(texts[a])) for a in requests}
        return {a: [-float(len(t)) for t in texts[a]] for a in requests}


def likelihood_batch(completions: dict[str, list[list[str]]], scorer: Scorer, k: int) -> RewardInput:
    n = len(next(iter(completions.values())))
    rollouts = {a: dataclasses.replace(ro(a, [[None] * len(c) for c in comps]), completions=comps)
                for a, comps in completions.items()}
    prompts = {a: [f"{a}-asks-p{i}" for i in range(n)] for a in completions}
    return RewardInput(step=0, problem_ids=[f"p{i}" for i in range(n)], rollouts=rollouts, samples_per_prompt=k,
                       prompts=prompts, likelihood=scorer)


def test_peer_likelihood_rewards_my_completions_by_the_peers_score_in_the_peers_own_prompt():
    scorer = Scorer()
    b = likelihood_batch({"a0": [["aa", "aaaa", "x"]], "a1": [["bbb", "b", "zz"]]}, scorer, k=2)
    out = make("peer-likelihood", 2).rewards(b)
    assert out["a0"].rewards == [[-2.0, -4.0]] and out["a1"].rewards == [[-3.0, -1.0]]  # first K only
    assert out["a0"].pseudo_labels is None and out["a0"].metrics["peer_loglik"] == -3.0
    # a1 scored a0's completions, each in a1's own request for the problem (and a0 scored a1's)
    assert scorer.asked["a1"] == (["a1-asks-p0", "a1-asks-p0"], ["aa", "aaaa"])
    assert scorer.asked["a0"] == (["a0-asks-p0", "a0-asks-p0"], ["bbb", "b"])


def test_peer_likelihood_ring_and_all_peers_on_three_agents():
    comps = {"a0": [["a"]], "a1": [["bb"]], "a2": [["cccc"]]}
    ring = make("peer-likelihood", 3).rewards(likelihood_batch(comps, Scorer(), k=1))
    assert make("peer-likelihood", 3).teachers() == {"a0": ["a2"], "a1": ["a0"], "a2": ["a1"]}
    assert [ring[a].rewards[0][0] for a in ("a0", "a1", "a2")] == [-1.0, -2.0, -4.0]
    scorer = Scorer()
    everyone = make("peer-likelihood", 3, peers="all").rewards(likelihood_batch(comps, scorer, k=1))
    assert everyone["a0"].rewards == [[-1.0]]  # the mean of its two peers' scores (the double scores by length)
    assert scorer.asked["a0"][1] == ["bb", "cccc"]  # a0 scores a1's and a2's completions in one call
    with pytest.raises(ConfigError, match="peers must be one of"):
        METHODS.get("peer-likelihood").parse_options({"peers": "best"})
    with pytest.raises(RuntimeError, match="scoring forward"):
        make("peer-likelihood", 2).rewards(batch({"a0": [["1"]], "a1": [["1"]]}, k=1))


def test_an_agents_likelihood_is_its_models_mean_log_prob_of_the_reply_in_its_own_tokenizer(tiny_qwen):
    """The real scoring forward (Agent.likelihood) against a direct transformers computation, on two agents of
    different families: each re-encodes the other's text with its own tokenizer."""
    import torch

    from corl_bench.config import AgentSpec, GRPOConfig
    from corl_bench.train.agent import Agent
    from corl_bench.micro.families import build_model, build_tokenizer
    from tests.conftest import tiny_family

    prompt, reply = "Q: 2 + 3 =", " 5 so the answer is \\boxed{5}"
    chars = build_tokenizer("char", [prompt + reply])  # another family's tokenizer: one token per character
    torch.manual_seed(1)
    pairs = {"qwen": tiny_qwen, "neox-char": (build_model(tiny_family("neox-bpe"), chars).eval(), chars)}
    for fam, (model, tok) in pairs.items():
        agent = Agent(AgentSpec(name=fam, family="qwen2-bpe"), model, tok, GRPOConfig(), temperature=0.7)
        got = agent.likelihood([prompt, prompt], [reply, ""])
        p_ids = tok(prompt)["input_ids"]
        r_ids = tok(reply, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p_ids + r_ids])).logits[0].float()
        logp = torch.log_softmax(logits[len(p_ids) - 1: -1], -1).gather(-1, torch.tensor(r_ids)[:, None])
        assert got[0] == pytest.approx(float(logp.mean()), abs=1e-5), fam  # temperature 1, not the rollout's 0.7
        with torch.no_grad():
            eos = torch.log_softmax(model(input_ids=torch.tensor([p_ids + [tok.eos_token_id]])).logits[0, -2].float(),
                                    -1)[tok.eos_token_id]
        assert got[1] == pytest.approx(float(eos), abs=1e-5)  # an empty reply: the model's end-of-sequence alone
    assert len(tiny_qwen[1](reply, add_special_tokens=False)["input_ids"]) < len(chars(reply, add_special_tokens=False)[
        "input_ids"]) == len(reply)  # two tokenizers


# ------------------------------------------------------------------------------------------------ CoVerRL
class Engine:
    """Test double of RewardInput.generate and .follow_up: scripted replies by role, requests as plain text."""

    def __init__(self, verify: list[str], regenerate: list[str]) -> None:
        self.replies = {"verify": list(verify), "regenerate": list(regenerate)}
        self.asked: dict[str, list[str]] = {"verify": [], "regenerate": []}

    def generate(self, agent, prompts, role, max_new_tokens=None):
        from corl_bench.rollout.base import Completion

        self.asked[role] += [str(p) for p in prompts]
        return [Completion(token_ids=(1, 2), logprobs=(), text=self.replies[role].pop(0), finished=True)
                for _ in prompts]

    @staticmethod
    def follow_up(agent, request, reply, user):
        return f"{request}|{reply}|{user[:5]}"


def coverrl_batch(answers, engine: Engine) -> RewardInput:
    from corl_bench.grading.verifier import extract_normalized

    k = len(answers[0])
    rollouts = {"a0": dataclasses.replace(ro("a0", answers), completions=[[f"r{p}{j}" for j in range(k)]
                                                                          for p in range(len(answers))])}
    return RewardInput(step=0, problem_ids=[f"p{i}" for i in range(len(answers))], rollouts=rollouts,
                       samples_per_prompt=k, prompts={"a0": [f"Q{p}" for p in range(len(answers))]},
                       generate=engine.generate, follow_up=engine.follow_up, extract=extract_normalized)


def test_coverrl_verifies_the_label_and_the_rarest_answer_and_trains_both_roles():
    # prompt 0: 7 x3, 4, None -> y = 7; v = min(2, 2) = 2: rollouts 0 and 1 checked, the rarest other answer (4,
    # rollout 3; a rollout without an answer sorts after it) checked twice. prompt 1: unanimous -> not verified.
    engine = Engine(verify=["ok. The answer is correct.", "hmm The answer is correct.", "The answer is wrong.",
                            "I see a mistake"], regenerate=["\\boxed{7}", "\\boxed{5}"])
    m = make("coverrl", 1, verify_max=2, regenerations=2)
    out = m.rewards(coverrl_batch([["7", "7", "7", "4", None], ["2", "2", "2", "2", "2"]], engine))["a0"]
    assert out.pseudo_labels == ["7", "2"]
    assert out.rewards == [[2.0, 2.0, 2.0, 1.0, 0.0], [2.0] * 5]  # 1 for an answer, +1 for agreeing with y
    assert engine.asked["verify"] == ["Q0|r00|Check", "Q0|r01|Check", "Q0|r03|Check", "Q0|r03|Check"]
    # verifier rewards: format + (verdict == target): correct/correct on y's rollouts; wrong (format) and wrong
    # (fuzzy, no format) on the rare answer's
    assert [e.reward for e in out.extra[:4]] == [2.0, 2.0, 2.0, 1.0] and out.extra[0].role == "verify"
    # one well-formatted 'wrong' verdict -> 2 regenerations, rewarded against y = 7
    assert engine.asked["regenerate"] == ["Q0|r03|Check|The answer is wrong.|You s"] * 2
    assert [e.reward for e in out.extra[4:]] == [2.0, 1.0]
    assert out.metrics["verified_fraction"] == 0.5 and out.metrics["dropped_fraction"] == 0.0
    adv = m.advantages(None, {"a0": out}, {"a0": [1] * (10 + 6)})["a0"]
    assert adv[10:12] == [0.0, 0.0]  # the label's two verifications: one group, equal rewards
    assert adv[12] == pytest.approx(0.7071, abs=1e-3) and adv[13] == pytest.approx(-0.7071, abs=1e-3)
    assert adv[14] == pytest.approx(0.7071, abs=1e-3) and adv[15] == pytest.approx(-0.7071, abs=1e-3)


def test_coverrl_drops_a_prompt_whose_label_its_verifier_rejects():
    engine = Engine(verify=["The answer is wrong.", "The answer is correct.", "The answer is correct.",
                            "The answer is correct."], regenerate=[])
    m = make("coverrl", 1, verify_max=2, regenerations=0)
    out = m.rewards(coverrl_batch([["7", "7", "3", "3", "3"][:4] + ["9"]], engine))["a0"]
    # y = 7 (first of the 2-2 tie); its two verifications say wrong once, correct once: wrong >= correct -> dropped
    assert out.pseudo_labels == [None] and out.rewards == [[0.0] * 5] and out.extra == []
    assert out.metrics["dropped_fraction"] == 1.0
    with pytest.raises(ConfigError, match="verify_max must be an even number"):
        METHODS.get("coverrl").parse_options({"verify_max": 3})
    with pytest.raises(RuntimeError, match="follow_up"):
        make("coverrl", 1).rewards(batch({"a0": [["1"]]}, k=1))


def test_follow_up_continues_the_conversation_in_the_models_chat_template(tiny_folder):
    from transformers import AutoTokenizer

    from corl_bench.hf.profile import chat_prompt, follow_up_text
    from corl_bench.profile import Profile
    from corl_bench.rollout import Request

    tok = AutoTokenizer.from_pretrained(tiny_folder)
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    first = chat_prompt(tok, "What is 2+2?")
    assert follow_up_text(tok, first, "4", "Check it.") == (
        "<|user|>What is 2+2?<|end|><|assistant|>4<|end|><|user|>Check it.<|end|><|assistant|>")
    tok.chat_template = None
    assert follow_up_text(tok, "Q", "4", "Check it.") is None
    plain = Profile.follow_up(Profile(), Request(text="Q: 2+2? A:"), " 4", "Check it.")
    assert plain == Request(text="Q: 2+2? A: 4\n\nCheck it.\n")


@pytest.mark.parametrize("family", ["smol", "gemma3-270m", "qwen2.5-coder-0.5b"])
def test_follow_up_in_the_real_models_templates(family):
    """A verifier turn in each real model's own chat template (its tokenizer only; skips where it is not prepared)."""
    from corl_bench.hf.profile import HFProfile
    from corl_bench.models.load import model_folder

    profile = HFProfile()
    try:
        folder = model_folder(family, profile.cache_root)
    except ConfigError as e:
        pytest.skip(str(e))
    if not (folder / "tokenizer_config.json").is_file():
        pytest.skip(f"{family} is not dequantised yet (its first run prepares it)")
    tok = profile.tokenizer(family)
    first = profile.render(_Problem(), "original", model=family)
    turn = profile.follow_up(first, "I think 4.", "Check it.", model=family)
    assert turn.text.startswith(first.text + "I think 4.") and "Check it." in turn.text
    if tok.chat_template:  # a new user turn, then the template's own generation prompt
        from corl_bench.hf.profile import chat_prompt

        opening = chat_prompt(tok, "X").rsplit("X", 1)[-1]
        assert turn.text.endswith("Check it." + opening) and turn.text != first.text + "I think 4.\n\nCheck it.\n"


class _Problem:
    def text(self, view):
        return "What is 2+2?"


# ------------------------------------------------------------------------------------------------ DCRL
class Explorer:
    """Test double of RewardInput.explore: a scripted explorer pool per agent; records what it was asked."""

    def __init__(self, pools: dict[str, list[list[str]]]) -> None:
        self.pools, self.asked = pools, {}

    def __call__(self, model, unlearn, requests, n, lr, eps=0.01):
        from corl_bench.rollout.base import Completion

        self.asked = {"model": model, "unlearn": unlearn, "n": n, "lr": lr}
        return {a: [[Completion(token_ids=(1,), logprobs=(), text=f"\\boxed{{{x}}}", finished=True) for x in row]
                    for row in self.pools[a]] for a in requests}


def dcrl_batch(answers, explorer: Explorer) -> RewardInput:
    from corl_bench.grading.verifier import extract_normalized

    k = len(answers[0])
    rollouts = {"a0": dataclasses.replace(ro("a0", answers), completions=[[f"c{p}{j}" for j in range(k)]
                                                                          for p in range(len(answers))])}
    return RewardInput(step=0, problem_ids=[f"p{i}" for i in range(len(answers))], rollouts=rollouts,
                       samples_per_prompt=k, prompts={"a0": [f"Q{p}" for p in range(len(answers))]},
                       explore=explorer, extract=extract_normalized)


def test_dcrl_labels_what_anchor_and_explorer_agree_on_and_skips_prompts_where_it_overrides_the_majority():
    # prompt 0: anchor 5 5 6 6 (5 first), explorer 6 6 6 5: hm(6) = .6 > hm(5) = .333 -> label 6, not the anchor's
    #   plurality 5: the release gives every rollout 0.5 (no gradient);
    # prompt 1: anchor 3 3 3 4, explorer 3 9 9 9 -> hm(3) = 2*.75*.25/1 = .375 -> label 3 = the majority: 1/0;
    # prompt 2: nothing in both pools -> the anchor's plurality 8.
    explorer = Explorer({"a0": [["6", "6", "6", "5"], ["3", "9", "9", "9"], ["1", "1", "1", "1"]]})
    b = dcrl_batch([["5", "5", "6", "6"], ["3", "3", "3", "4"], ["8", "8", None, "2"]], explorer)
    out = make("dcrl", 1, unlearn_per_prompt=2).rewards(b)["a0"]
    assert out.pseudo_labels == ["6", "3", "8"]
    assert out.rewards == [[0.5] * 4, [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    assert out.metrics["label_changed_fraction"] == pytest.approx(1 / 3)
    # the explorer was unlearned on the first 2 anchor rollouts of every prompt, in the agent's own requests
    assert explorer.asked["unlearn"]["a0"] == [("Q0", "c00"), ("Q0", "c01"), ("Q1", "c10"), ("Q1", "c11"),
                                               ("Q2", "c20"), ("Q2", "c21")]
    assert explorer.asked["model"] == "explorer" and explorer.asked["n"] == 4 and explorer.asked["lr"] == {"a0": 3e-7}
    reserved = make("dcrl", 1, disagreement="reserved").rewards(b)["a0"]
    assert reserved.rewards[0] == [0.5, 0.5, 1.0, 1.0]  # README: 1 for the label, 0.5 for the anchor's plurality
    plain = make("dcrl", 1, harmonic=False).rewards(dcrl_batch([["5", "5", "6", "6"]], Explorer({})))["a0"]
    assert plain.pseudo_labels == ["5"] and plain.rewards == [[1.0, 1.0, 0.0, 0.0]]  # no explorer: TTRL's label
    with pytest.raises(ConfigError, match="disagreement must be one of"):
        METHODS.get("dcrl").parse_options({"disagreement": "half"})


def test_the_explorer_is_the_policy_moved_away_from_the_unlearned_tokens(tiny_qwen):
    """The real explore call (Agent.explore): the copy starts as the policy, one step lowers the likelihood of the
    unlearned replies under the copy, the policy does not move, and the copy's engine samples from the copy."""
    import copy

    import torch

    from corl_bench.config import AgentSpec, GRPOConfig
    from corl_bench.rollout import SamplingParams
    from corl_bench.train.agent import Agent
    from corl_bench.train.likelihood import reply

    model, tok = tiny_qwen
    cls = METHODS.get("dcrl")
    agent = Agent(AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, GRPOConfig(), temperature=1.0,
                  auxiliary=cls.auxiliary)
    prompt, text = "Q: 2 + 3 =", " 5 so \\boxed{5}"
    before = {k: v.clone() for k, v in agent.model.state_dict().items()}
    params = SamplingParams(n=2, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=7)

    def copy_loglik() -> float:
        module = agent.auxiliary["explorer"]
        ids, att, cmask, _ = agent._batch([prompt], [reply(tok, text)])
        with torch.no_grad():
            logp = torch.log_softmax(module(input_ids=ids, attention_mask=att).logits[:, :-1].float(), -1)
        return float((logp.gather(-1, ids[:, 1:, None])[..., 0] * cmask[:, 1:]).sum() / cmask[:, 1:].sum())

    same = agent.explore([(prompt, text)], [prompt], params, model="explorer", lr=0.0)
    assert copy_loglik() == pytest.approx(agent.likelihood([prompt], [text])[0], abs=1e-5)  # lr 0: the policy
    assert [c.token_ids for c in same[0]] == [c.token_ids for c in agent.generate([prompt], params)[0]]
    # (a random tiny model gives every token p < 0.01: the release's clamp at 0.01 would leave no gradient)
    agent.explore([(prompt, text)], [prompt], params, model="explorer", lr=1e-2, eps=1e-6)
    assert copy_loglik() < agent.likelihood([prompt], [text])[0] - 0.05  # the unlearned reply became less likely
    assert all(torch.equal(before[k], v) for k, v in agent.model.state_dict().items())  # the policy did not move
    assert not any(p.requires_grad for p in agent.auxiliary["explorer"].parameters())


def test_extra_generations_stop_where_the_agents_rollouts_stop():
    """RewardInput.generate (debate turns, verifier turns) samples with the agent's stop strings: a few-shot agent's
    turn ends at its next "Question:" as its rollouts do."""
    from corl_bench.config import AgentSpec, load_config
    from corl_bench.hf.profile import HFProfile
    from corl_bench.train.trainer import Trainer

    seen = {}

    class Agent:
        def __init__(self, name, prompt):
            self.name, self.spec = name, AgentSpec(name=name, family="smol", prompt=prompt)

        def generate(self, prompts, params):
            seen[self.name] = params
            return [[None] for _ in prompts]

    trainer = Trainer.__new__(Trainer)
    trainer.cfg, trainer.profile = load_config(None, []), HFProfile()
    trainer.agents = [Agent("few", "fewshot"), Agent("chat", "")]
    generate = trainer._generator(step=3)
    generate("few", ["Q"], "debate-r1")
    generate("chat", ["Q"], "debate-r1")
    assert seen["few"].stop == HFProfile.stop_strings("fewshot") and seen["few"].stop
    assert seen["chat"].stop == ()  # the default prompt has no stop strings
