"""The real-model profile ``hf``: Hugging Face causal LMs (model entries, folders, cached hub ids), real training
sets with a contamination check, a model-written rephrased view, and evaluation on the benchmark specs."""
