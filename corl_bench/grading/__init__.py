"""Answer grading shared by training and evaluation: :mod:`corl_bench.grading.verifier` (extraction, normalisation,
equivalence, voting). It sits below evaluation, training, the method contract and the profiles (the micro warm start
grades with it) and imports none of them."""
