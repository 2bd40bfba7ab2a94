"""Real model families' chat templates (``templates/``, see PROVENANCE.md there), each with a small tokenizer built
here that carries the family's special tokens, what platoon must make of the template, and tool-call outputs as the
family's models write them.

- ``Family``: a template file, its bos/eos and special tokens, the renderer options it needs (``kwargs``), the
  parser the probe must pick (None: the template is refused without ``kwargs``), and ``outputs``: completions (the
  family's own call syntax) with the calls they make;
- ``family_tokenizer(family)``: a byte-level BPE tokenizer trained on a few lines (the BPE model once per family),
  with the family's special tokens and its template; ``metaspace=True`` gives a sentencepiece-like one whose
  pre-tokenizer prepends ``▁`` to the start of every text it encodes (not after a special token) (transformers 5's Llama tokenizer with ``legacy: false``).

Needs transformers and tokenizers (callers skip without them).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from platoon.live.envs.text import ToolCall

TEMPLATES = Path(__file__).parent / "templates"

QWEN = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>")
LLAMA = ("<|begin_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|start_header_id|>", "<|end_header_id|>",
         "<|python_tag|>")
DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
            "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
            "<think>", "</think>")

GUESS = ToolCall("guess", {"number": 8})
SAY = ToolCall("say", {"text": "</tool_call> [TOOL_CALLS] a; b <｜tool▁call▁end｜>"})
FALLBACK = {"tool_fallback": "system_message"}


def hermes(*calls: ToolCall) -> str:
    return "\n".join(f'<tool_call>\n{json.dumps({"name": c.name, "arguments": c.arguments})}\n</tool_call>'
                     for c in calls)


def hermes_outputs(reasoning: bool = False) -> list[tuple[str, list[ToolCall]]]:
    out = [(hermes(GUESS), [GUESS]), ("Two at once.\n" + hermes(GUESS, SAY), [GUESS, SAY])]
    if reasoning:  # a call drafted while thinking is not a call
        out.append((f"<think>\nMaybe {hermes(ToolCall('finish', {}))}? No.\n</think>\n\n{hermes(GUESS)}", [GUESS]))
    return out


def llama(*calls: ToolCall) -> str:
    return "; ".join(json.dumps({"name": c.name, "parameters": c.arguments}) for c in calls)


def coder(*calls: ToolCall) -> str:
    return "\n".join(f"<tool_call>\n<function={c.name}>\n"
                     + "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in c.arguments.items())
                     + "</function>\n</tool_call>" for c in calls)


@dataclass(frozen=True)
class Family:
    template: str
    bos: str | None
    eos: str
    specials: tuple[str, ...]
    parser: str | None  # what the probe picks with ``kwargs``; None: refused without them
    kwargs: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)
    refusal: str = ""  # what the refusal without ``kwargs`` says


FAMILIES = {
    "qwen2.5": Family("Qwen-Qwen2.5-7B-Instruct", None, "<|im_end|>", QWEN, "hermes", outputs=hermes_outputs()),
    "qwen3": Family("Qwen-Qwen3-0.6B", None, "<|im_end|>", QWEN, "hermes", outputs=hermes_outputs(True)),
    "qwen3-no-thinking": Family("Qwen-Qwen3-0.6B", None, "<|im_end|>", QWEN, "hermes",
                                {"chat_template_kwargs": {"enable_thinking": False}}, hermes_outputs(True)),
    "qwen3-coder": Family("Qwen3-Coder", None, "<|im_end|>", QWEN, "qwen3_coder",
                          outputs=[(coder(GUESS), [GUESS]), (coder(GUESS, ToolCall("say", {"text": "a b"})),
                                                             [GUESS, ToolCall("say", {"text": "a b"})])]),
    "qwen3.5": Family("Qwen3.5-4B", None, "<|im_end|>", QWEN, "qwen3_coder",
                      outputs=[(coder(GUESS), [GUESS]), (f"<think>\nmaybe {coder(SAY)}\n</think>\n\n{coder(GUESS)}",
                                                         [GUESS])]),
    "llama3.1": Family("meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>", LLAMA, "llama3_json",
                       outputs=[(llama(GUESS), [GUESS]), ("<|python_tag|>" + llama(GUESS, SAY), [GUESS, SAY])]),
    "llama3.2": Family("meta-llama-Llama-3.2-3B-Instruct", "<|begin_of_text|>", "<|eot_id|>", LLAMA, "llama3_json",
                       {"chat_template_kwargs": {"date_string": "26 Jul 2024"}},
                       [(llama(GUESS), [GUESS]), (llama(GUESS, SAY), [GUESS, SAY])]),
    "hermes3": Family("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "<|begin_of_text|>", "<|im_end|>",
                      ("<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"), "hermes",
                      outputs=hermes_outputs()),
    "mistral": Family("mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>",
                      ("<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]",
                       "[TOOL_RESULTS]", "[/TOOL_RESULTS]"), None,
                      refusal="holds the tool list 2 time"),
    "deepseek-r1-distill": Family("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "<｜begin▁of▁sentence｜>",
                                  "<｜end▁of▁sentence｜>", DEEPSEEK, None, FALLBACK, hermes_outputs(True),
                                  refusal="drops the tool list"),
    "deepseek-v3.1": Family("deepseek-ai-DeepSeek-V3.1", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", DEEPSEEK,
                            None, FALLBACK, hermes_outputs(), refusal="drops the tool list"),
    "gemma-2": Family("google-gemma-2-2b-it", "<bos>", "<eos>", ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"),
                      None, FALLBACK, hermes_outputs(), refusal="drops the tool list, drops tool results, writes no"),
    "phi-3.5": Family("microsoft-Phi-3.5-mini-instruct", "<s>", "<|endoftext|>",
                      ("<s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), None, FALLBACK,
                      hermes_outputs(), refusal="drops the tool list, drops tool results, writes no"),
}
"""The families the tests hold platoon to (``parser`` None with ``kwargs``: supported through ``tool_fallback``)."""

MISTRAL_KEPT_IN_PLACE = "mistral-own-template"
"""Mistral-Nemo's template with the tool list before the first user message, not the last: a template of one's own
(``renderer_kwargs.chat_template``), the way docs/renderers.md says to train such a model."""


def mistral_own_template() -> str:
    text = (TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text()
    patched = text.replace("(message == user_messages[-1])", "(message == user_messages[0])")
    assert patched != text
    return patched


_CORPUS = ("hello world the number is higher lower guess say finish tool call name arguments parameters",
           '{"name": "guess", "arguments": {"number": 8}} function type object properties description')


@functools.cache
def _trained(specials: tuple[str, ...], metaspace: bool) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = sorted(set("".join(_CORPUS)) | set("▁\n{}[]<>|/\"':;,.-_=0123456789abcdefghijklmnopqrstuvwxyz"))
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=alphabet)
    tok.train_from_iterator(list(_CORPUS) * 4, trainer)
    return tok.to_str()


def family_tokenizer(family: Family, *, metaspace: bool = False, template: str | None = None):
    """A fresh ``PreTrainedTokenizerFast`` for ``family`` (see the module's doc)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    specials = tuple(dict.fromkeys(s for s in (family.bos, family.eos, *family.specials) if s))
    hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_trained(specials, metaspace)),
                                 bos_token=family.bos, eos_token=family.eos, pad_token=family.eos,
                                 additional_special_tokens=[s for s in specials if s not in (family.bos, family.eos)])
    hf.chat_template = template or (TEMPLATES / f"{family.template}.jinja").read_text()
    hf.name_or_path = family.template
    return hf
