"""A local causal LM as a tool-calling policy: batched, seeded sampling with the tool chat template."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfactory_assets.config_checks import finite_number, number_types, one_of, setting, whole_number
from envfactory_assets.evaluation.prefix_cache import (
    PrefixCache,
    batch_inputs,
    row_layers,
    supports_prefix_reuse,
)
from envfactory_assets.tooluse.answer_stop import answer_stop_criterion
from envfactory_assets.tooluse.chat_template import normalize_messages
from envfactory_assets.training.base_model import (
    DEVICE_SETTINGS,
    force_offline,
    prepare_tokenizer,
    select_device,
)
from envfactory_assets.training.threads import ThreadGovernor


@dataclass(frozen=True)
class SamplingSpec:
    """How the policy samples; each field's default and help text are stated here alone
    (``metadata["help"]``).

    Raises:
        SettingError: (a ValueError) a setting of the wrong type or out of range, named in the message.
    """

    temperature: float = setting(
        0.0,
        "softmax temperature of sampling; 0 = greedy, BFCL's own protocol and the evaluations' headline "
        "(0.7 is the paper's rollout temperature, which GRPO's rollouts use).",
    )
    top_p: float = setting(1.0, "nucleus mass (1.0 = off).")
    max_new_tokens: int = setting(64, "generation budget per assistant message (tokens).")
    batch_size: int = setting(12, "conversations generated together (left padding); larger is faster on a CPU.")
    max_prompt_tokens: int = setting(
        3072,
        "a longer prompt loses its oldest messages after the system message "
        "(whole messages; the tool block and the last message are kept).",
    )
    prefix_cache_tokens: int = setting(
        40_000,
        "token positions of earlier sequences whose key/value caches are "
        "kept for prompts that start with the same tokens (~46 KB each "
        "for SmolLM2-135M); 0 encodes every prompt in full.",
    )
    device: str = setting(
        "auto",
        "'auto' (a CUDA device when torch sees one, weights in bf16 where supported, "
        "else fp16), 'cpu' (float32), 'cpu_bf16' (the CPU with weights in bf16; refused on a "
        "CPU without native bf16 instructions) or 'cuda' (refused when no CUDA device is "
        "visible).",
    )

    def __post_init__(self) -> None:
        owner = "sampling"
        number_types(self, owner)
        one_of(owner, "device", self.device, DEVICE_SETTINGS)
        finite_number(owner, "temperature", self.temperature, low=0.0)
        finite_number(owner, "top_p", self.top_p, low=0.0, high=1.0, low_open=True)
        for name in ("max_new_tokens", "batch_size", "max_prompt_tokens"):
            whole_number(owner, name, getattr(self, name), low=1)
        whole_number(owner, "prefix_cache_tokens", self.prefix_cache_tokens, low=0)


class Policy:
    """A Hugging Face model directory loaded once, generating assistant messages for many conversations.

    Args:
        model_dir: local HF model directory (the base model or a checkpoint); the tool chat template and a
            distinct pad token are installed on load (``base_model.prepare_tokenizer``).
        sampling: :class:`SamplingSpec`.
        num_threads: torch threads while generating; None = free cores, re-chosen before every batch
            (:class:`~envfactory_assets.training.threads.ThreadGovernor`).

    The model, its inputs and the prefix cache's tensors live on ``sampling.device``'s resolved device
    (``self.plan``).

    Raises:
        OSError: ``model_dir`` is not a loadable model directory.
        ValueError: ``sampling.device`` is ``cuda`` and no CUDA device is visible.
    """

    def __init__(self, model_dir: Path, sampling: SamplingSpec | None = None, num_threads: int | None = None) -> None:
        force_offline()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = Path(model_dir)
        self.sampling = sampling or SamplingSpec()
        self.plan = select_device(self.sampling.device, "sampling setting device")
        self.num_threads = num_threads
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=self.plan.torch_dtype()).eval()
        prepare_tokenizer(self.tokenizer, self.model)
        self.model.to(self.plan.device)
        self.tokenizer.padding_side = "left"
        self.generated_tokens = 0
        self.truncated = 0
        self.last_cut_off: list[bool] = []
        self.threads = ThreadGovernor(num_threads)
        self.prefix_cache = (
            PrefixCache(self.sampling.prefix_cache_tokens)
            if self.sampling.prefix_cache_tokens and supports_prefix_reuse(self.model)
            else None
        )

    def _encode(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        """Prompt token ids; over ``max_prompt_tokens``, the oldest messages after the system message are
        dropped (whole messages, never the tool block or the last message) until it fits."""
        messages = normalize_messages(messages)
        while True:
            ids = self.tokenizer.apply_chat_template(
                messages, tools=tools or [], add_generation_prompt=True, return_dict=True
            )["input_ids"]
            first = 1 if messages and messages[0]["role"] == "system" else 0
            if len(ids) <= self.sampling.max_prompt_tokens or len(messages) - first <= 1:
                return list(ids)
            self.truncated += 1
            messages = messages[:first] + messages[first + 1 :]

    def generate(
        self,
        conversations: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]],
        seed: int,
        max_new_tokens: int | None = None,
        prose_stop_tokens: int = 0,
    ) -> list[str]:
        """One assistant message per ``(messages, tools)`` conversation, decoded without special tokens.

        ``max_new_tokens`` overrides the sampling spec's budget for this call (a benchmark whose answers are
        longer than the default). ``prose_stop_tokens`` > 0 stops each output, on its own, as soon as
        :func:`~envfactory_assets.tooluse.tool_calls.answer_is_complete` says its calls can no longer change
        (for answers scored by their calls alone: the rest of the batch no longer waits for one output's
        prose). Afterwards ``last_cut_off[i]`` says whether output ``i`` stopped at the budget rather than
        at an end-of-turn token or that rule.

        Conversations are batched in order of prompt length (less padding); the sampling generator is
        seeded with ``seed`` before each batch, so the same inputs, batch size and seed give the same texts
        (with the prefix cache on, up to float rounding: a reused prefix is the same computation in a
        different order).

        Returns:
            Texts in the order of ``conversations``.
        """
        import torch

        encoded = [self._encode(m, t) for m, t in conversations]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        texts: list[str] = [""] * len(encoded)
        cut_off: list[bool] = [False] * len(encoded)
        spec = self.sampling
        budget = spec.max_new_tokens if max_new_tokens is None else max_new_tokens
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"generate: max_new_tokens={max_new_tokens!r}: expected a whole number >= 1")
        if isinstance(prose_stop_tokens, bool) or not isinstance(prose_stop_tokens, int) or prose_stop_tokens < 0:
            raise ValueError(f"generate: prose_stop_tokens={prose_stop_tokens!r}: expected a whole number >= 0")
        # The governor measures once and then lives as long as the policy (adjusted per batch, no new sampling
        # window per call); the caller's thread count is restored when each call returns, as before the
        # governor (it used to stay at the policy's count for the rest of the process).
        previous = torch.get_num_threads()
        if not self.threads.started:
            self.threads.start()
        else:
            torch.set_num_threads(self.threads.threads)
        try:
            for start in range(0, len(order), spec.batch_size):
                self.threads.adjust()
                chunk = order[start : start + spec.batch_size]
                torch.manual_seed(seed * 100_003 + start)
                batch = self._generate_batch([encoded[i] for i in chunk], budget, prose_stop_tokens)
                for i, (text, cut) in zip(chunk, batch, strict=True):
                    texts[i], cut_off[i] = text, cut
        finally:
            torch.set_num_threads(previous)
        self.last_cut_off = cut_off
        return texts

    def _generate_batch(
        self, prompts: list[list[int]], max_new_tokens: int, prose_stop_tokens: int = 0
    ) -> list[tuple[str, bool]]:
        """Sample one continuation per prompt (one ``generate`` call), reusing cached prefixes when enabled;
        each with whether it was cut off at ``max_new_tokens`` (no end-of-turn or padding token in it, and
        not stopped as a complete answer)."""
        import torch

        spec = self.sampling
        kwargs = (
            {"do_sample": True, "temperature": spec.temperature, "top_p": spec.top_p}
            if spec.temperature > 0
            else {"do_sample": False}
        )
        pad = self.tokenizer.pad_token_id
        cache = self.prefix_cache
        rows = [(ids, *cache.lookup(ids)) if cache else (ids, None, 0) for ids in prompts]
        input_ids, attention_mask, past = batch_inputs(rows, pad, self.model.config, self.model.device)
        width = input_ids.shape[1]
        answer_stop = answer_stop_criterion(self.tokenizer, width, prose_stop_tokens) if prose_stop_tokens else None
        with torch.inference_mode():
            if past is not None:
                kwargs["cache"] = past
            if answer_stop is not None:
                kwargs["stopping_criteria"] = [answer_stop]
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_new_tokens,
                pad_token_id=pad,
                return_dict_in_generate=True,
                **kwargs,
            )
        new_tokens = output.sequences[:, width:]
        self.generated_tokens += int((new_tokens != pad).sum())
        if cache is not None:
            cache.reused_tokens += sum(n for _, _, n in rows)
            cache.encoded_tokens += sum(len(ids) - n for ids, _, n in rows)
            fed = output.cache.get_seq_length() - width  # generated tokens that went through the model
            for row, (ids, _, _) in enumerate(rows):
                positions = torch.cat(
                    [
                        attention_mask[row].nonzero().flatten(),
                        torch.arange(width, width + fed, device=attention_mask.device),
                    ]
                )
                cache.add(list(ids) + new_tokens[row, :fed].tolist(), row_layers(output.cache, row, positions))
        eos = self.model.generation_config.eos_token_id
        stops = torch.tensor(
            [pad, *([] if eos is None else [eos] if isinstance(eos, int) else eos)], device=new_tokens.device
        )
        # A finished row ends in an end-of-turn token and is padded after it; a row without either ran out.
        ended = torch.isin(new_tokens, stops).any(dim=1).tolist()
        if answer_stop is not None:
            ended = [done or row in answer_stop.stopped for row, done in enumerate(ended)]
        full = new_tokens.shape[1] >= max_new_tokens
        texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return [(text, full and not done) for text, done in zip(texts, ended, strict=True)]


#: The one answer of :class:`DoNothingPolicy`: a plain reply with no tool call.
DO_NOTHING_REPLY = "I cannot do that with the tools I have."


class DoNothingPolicy:
    """A built-in policy that never calls a tool: every assistant message is :data:`DO_NOTHING_REPLY`.

    Evaluated next to every model on the same tasks (no model needed), it is the floor a score must rise
    above: on the paper's hybrid reward it earns the state half on every read-only task, on task success it
    earns 0 wherever a call is wanted (and full marks on BFCL's ``irrelevance``, where no call is right).
    Same ``generate`` signature as :class:`Policy`.
    """

    generated_tokens = 0
    truncated = 0
    tokenizer = None

    def __init__(self) -> None:
        self.last_cut_off: list[bool] = []

    def generate(
        self,
        conversations: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]],
        seed: int,
        max_new_tokens: int | None = None,
        prose_stop_tokens: int = 0,
    ) -> list[str]:
        """One :data:`DO_NOTHING_REPLY` per conversation (``seed``, the budget and the stop rule are ignored:
        there is nothing to sample, and no output is cut off)."""
        self.last_cut_off = [False] * len(conversations)
        return [DO_NOTHING_REPLY] * len(conversations)
