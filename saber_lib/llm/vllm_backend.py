"""vLLM's offline engine: ``LLM(...).chat(...)`` with tensor parallelism and guided decoding.

``vllm`` is imported only when this backend is built. The model is ``llm.model_path`` (a local
Hugging Face folder) or else ``llm.model`` (a hub id, which needs the weights in the local HF
cache). ``llm.engine_kwargs`` go to ``vllm.LLM`` as they are (e.g. ``enforce_eager``, ``dtype``,
``gpu_memory_utilization``).

Requests go to the engine in chunks of ``llm.max_concurrency``; every answer of a chunk is cached
as soon as the chunk returns, so a killed run repeats at most one chunk. ``latency_s`` of a result
is the wall time of its chunk.

Guided decoding uses ``StructuredOutputsParams`` (newer vLLM) or ``GuidedDecodingParams`` (older).
Log-probability mode scores each option exactly. When every option is one token right after the
chat prompt (ending in the assistant prefill), as "1" / "2" after ``\\boxed{``, the prompt is read
once and the options' next-token log-probabilities are read directly (``logprob_token_ids``).
Otherwise the prompt plus each option is fed as a token prompt with ``prompt_logprobs=0`` (the
prompt read once per option, with a log-softmax at every position) and the option's
log-probability is the sum over its tokens. ``prompt_tokens`` is the prompt's length (counted once,
as the other backends count it) and ``completion_tokens`` the longest option's.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from .base import Backend, Job
from .types import ChatRequest, ChatResult, LLMError

INSTALL_HINT = ("the vllm backend needs vLLM: on GPUs `pip install vllm`; on a CPU install the "
                "project's 'vllm' extra in its own environment (see tools/test_vllm.sh)")


def _guided_kwargs(req: ChatRequest) -> dict:
    spec = {}
    if req.json_schema is not None:
        spec["json"] = req.json_schema
    if req.regex is not None:
        spec["regex"] = req.regex
    if req.choices is not None:
        spec["choice"] = list(req.choices)
    if not spec:
        return {}
    try:
        from vllm.sampling_params import StructuredOutputsParams  # heavy, optional: vLLM

        return {"structured_outputs": StructuredOutputsParams(**spec)}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams  # older vLLM name

        return {"guided_decoding": GuidedDecodingParams(**spec)}


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(self, model_id: str, model_path: str | None = None, cache=None, *,
                 tensor_parallel_size: int = 1, max_model_len: int | None = None,
                 max_concurrency: int = 256, engine_kwargs: dict | None = None, **kw):
        super().__init__(model_id, cache, **kw)
        try:
            import vllm  # heavy, optional: the vllm extra
        except ImportError:
            raise LLMError(INSTALL_HINT) from None
        if not hasattr(vllm, "LLM"):  # e.g. a folder named vllm on sys.path, not the package
            raise LLMError(INSTALL_HINT)
        self._vllm = vllm
        args = dict(model=model_path or model_id, tensor_parallel_size=tensor_parallel_size)
        if max_model_len is not None:
            args["max_model_len"] = max_model_len
        args.update(engine_kwargs or {})
        self._llm = vllm.LLM(**args)
        self.chunk = max(1, max_concurrency)
        # newer vLLM scores given token ids at the next position (SamplingParams.logprob_token_ids)
        self.score_next_token = "logprob_token_ids" in getattr(vllm.SamplingParams, "__struct_fields__", ())

    def _template_kwargs(self) -> dict:
        return {"reasoning_effort": self.reasoning_effort} if self.reasoning_effort else {}

    def _sampling(self, req: ChatRequest, seed: int):
        kw = dict(temperature=req.temperature, max_tokens=req.max_tokens, seed=seed)
        kw.update(_guided_kwargs(req))
        kw.update(req.extra)
        return self._vllm.SamplingParams(**kw)

    def _chat_chunk(self, jobs: list[Job], prefill: bool) -> list[ChatResult]:
        t0 = time.perf_counter()
        extra = {}
        if self._template_kwargs():
            extra["chat_template_kwargs"] = self._template_kwargs()
        outs = self._llm.chat([list(r.messages) for _, r, _ in jobs],
                              sampling_params=[self._sampling(r, s) for _, r, s in jobs],
                              use_tqdm=False, add_generation_prompt=not prefill,
                              continue_final_message=prefill, **extra)
        latency = time.perf_counter() - t0
        results = []
        for (_, req, _), out in zip(jobs, outs):
            comp = out.outputs[0]
            text = comp.text
            if prefill:
                text = req.prefill + text
            results.append(ChatResult(text=text, prompt_tokens=len(out.prompt_token_ids or []),
                                      completion_tokens=len(comp.token_ids), latency_s=latency,
                                      finish_reason=comp.finish_reason))
        return results

    def _option_prompts(self, req: ChatRequest) -> tuple[list[int], list[tuple[list[int], int]]]:
        """The prompt's token ids and, for each option, (token ids of prompt + option, index where
        the option's tokens start)."""
        tok = self._llm.get_tokenizer()
        prefill = req.prefill is not None
        text = tok.apply_chat_template(list(req.messages), tokenize=False, add_generation_prompt=not prefill,
                                       continue_final_message=prefill, **self._template_kwargs())
        base = tok(text, add_special_tokens=False)["input_ids"]
        out = []
        for opt in req.logprobs_for:
            full = tok(text + opt, add_special_tokens=False)["input_ids"]
            k = 0
            while k < min(len(base), len(full)) and base[k] == full[k]:
                k += 1
            if k == len(full):
                raise LLMError(f"option {opt!r} adds no token to the prompt")
            out.append((full, k))
        return base, out

    def _next_token_ids(self, base: list[int], options: list[tuple[list[int], int]]) -> list[int] | None:
        """One token id per option when each option is exactly one token after the unchanged prompt
        (and the engine can score given ids), else ``None``."""
        if not self.score_next_token:
            return None
        ids = [full[k] for full, k in options]
        if any(k != len(base) or len(full) != k + 1 for full, k in options) or len(set(ids)) != len(ids):
            return None
        return ids

    def _logprob_chunk(self, jobs: list[Job]) -> list[ChatResult]:
        from vllm.inputs import TokensPrompt  # heavy, optional: vLLM

        t0 = time.perf_counter()
        prompts, params, owners = [], [], []
        whole = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        for j, (_, req, _) in enumerate(jobs):
            base, options = self._option_prompts(req)
            next_ids = self._next_token_ids(base, options)
            if next_ids is not None:  # one prompt, the options' next-token log-probabilities read directly
                prompts.append(TokensPrompt(prompt_token_ids=base))
                params.append(self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=len(next_ids),
                                                        logprob_token_ids=next_ids))
                owners.append((j, dict(zip(req.logprobs_for, next_ids)), base, len(base)))
                continue
            for opt, (ids, k) in zip(req.logprobs_for, options):
                prompts.append(TokensPrompt(prompt_token_ids=ids))
                params.append(whole)
                owners.append((j, opt, ids, k))
        outs = self._llm.generate(prompts, params, use_tqdm=False)
        latency = time.perf_counter() - t0
        results = [ChatResult(text="", latency_s=latency, finish_reason="logprobs", logprobs={})
                   for _ in jobs]
        for (j, opt, ids, k), out in zip(owners, outs):
            res = results[j]
            if isinstance(opt, dict):
                scores = out.outputs[0].logprobs[0]
                res.logprobs.update({o: float(scores[t].logprob) for o, t in opt.items()})
                res.prompt_tokens, res.completion_tokens = k, 1
                continue
            res.logprobs[opt] = sum(float(out.prompt_logprobs[pos][ids[pos]].logprob) for pos in range(k, len(ids)))
            # one request, one prompt (as the other backends count it), however many options score it
            res.prompt_tokens = max(res.prompt_tokens, k)
            res.completion_tokens = max(res.completion_tokens, len(ids) - k)
        return results

    def _generate(self, jobs: list[Job]) -> Iterator[tuple[int, ChatResult]]:
        groups: dict[str, list[Job]] = {"logprobs": [], "prefill": [], "chat": []}
        for job in jobs:
            req = job[1]
            kind = "logprobs" if req.logprobs_for is not None else "prefill" if req.prefill is not None else "chat"
            groups[kind].append(job)
        for kind, group in groups.items():
            for s in range(0, len(group), self.chunk):
                chunk = group[s:s + self.chunk]
                try:
                    res = (self._logprob_chunk(chunk) if kind == "logprobs"
                           else self._chat_chunk(chunk, prefill=kind == "prefill"))
                except (ValueError, TypeError, LLMError) as e:  # a bad request, not a broken engine
                    res = [ChatResult(error=f"vllm: {type(e).__name__}: {e}") for _ in chunk]
                for (i, _, _), r in zip(chunk, res):
                    yield i, r

    def close(self) -> None:
        self._llm = None
