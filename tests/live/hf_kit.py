"""A tiny Hugging Face chat model built in the test, with no download: a tokenizer with a Qwen-style chat template
that renders tools and tool calls, a randomly initialised causal LM sized for it, and a fake Hugging Face cache.

- ``chat_tokenizer()``: a byte-level BPE tokenizer (``tokenizers``, trained here on a few lines, so its merges make
  ``"hello"`` one id while the five ids of its letters decode to the same text: re-tokenising a sampled completion
  can change its ids) in a ``PreTrainedTokenizerFast`` with ``<|im_start|>``, ``<|im_end|>`` and the eos
  ``<|endoftext|>``, carrying ``CHAT_TEMPLATE`` (hermes ``<tool_call>`` blocks, ``<tool_response>`` turns);
- ``save_chat_model(path)``: that tokenizer and a tiny Llama of its vocabulary saved to ``path`` (a local checkpoint
  for ``train.model_name``);
- ``hub_cache_entry(cache, repo_id, source)``: ``source``'s files laid out in the cache directory ``cache`` the way
  ``huggingface_hub`` stores a downloaded model (``models--org--name/refs/main`` naming a commit,
  ``snapshots/<commit>/`` holding the files), so that a model id resolves offline.

Needs transformers and tokenizers (callers skip without them).
"""

from __future__ import annotations

import functools
import hashlib
import shutil
from pathlib import Path

from live_harness import save_tiny_llama

CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions. Their signatures are within <tools></tools>:\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each call, return a JSON object within <tool_call></tool_call> tags:\n"
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}"
    "<|im_start|>assistant\n{{ message.content }}"
    "{% for call in message.tool_calls or [] %}"
    "{% if message.content or not loop.first %}{{ '\\n' }}{% endif %}"
    "<tool_call>\n{\"name\": \"{{ call.function.name }}\", \"arguments\": {{ call.function.arguments | tojson }}}"
    "\n</tool_call>"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% elif message.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2.5's chat template, shortened: tools in the system turn, hermes tool calls, tool results as user turns."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

_CORPUS = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhello world<|im_end|>\n",
    "<|im_start|>assistant\n<tool_call>\n{\"name\": \"craft\", \"arguments\": {\"target\": \"plank\", \"count\": 4}}"
    "\n</tool_call><|im_end|>\n",
    "<tool_response>\ncrafted 4 plank\n</tool_response> view_inventory get_info finish message",
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"guess a number\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"guess\": {\"type\": \"integer\"}}}}}",
    "hello hello the number is higher lower correct inventory ingredients oak log stick",
)


@functools.lru_cache(maxsize=4)
def _trained(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(_CORPUS) * 4, trainer)
    return tok.to_str()


def chat_tokenizer(vocab_size: int = 400, *, chat_template: str = CHAT_TEMPLATE):
    """A fresh ``PreTrainedTokenizerFast`` (see the module's doc); the BPE model is trained once per size."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_trained(vocab_size)),
                                 eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                 additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    hf.chat_template = chat_template
    return hf


def save_chat_model(path, *, context: int = 2048) -> Path:
    """``chat_tokenizer()`` and a tiny randomly initialised Llama over its ids, saved to the directory ``path``.
    ``context`` is its ``max_position_embeddings`` (rotary: no weights); a prompt with four tools is ~550 ids."""
    tokenizer = chat_tokenizer()
    save_tiny_llama(path, vocab_size=len(tokenizer), context=context)
    tokenizer.save_pretrained(str(path))
    return Path(path)


def save_vllm_chat_model(path, *, context: int = 2048) -> Path:
    """``chat_tokenizer()`` and a tiny random Llama that vLLM's CPU build serves (hidden 128, 2 layers, head
    dimension 64: its CPU attention refuses 16), untied embeddings, saved to the directory ``path``."""
    import torch
    import transformers

    tokenizer = chat_tokenizer()
    cfg = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                   max_position_embeddings=context, eos_token_id=tokenizer.eos_token_id,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return Path(path)


def hub_cache_entry(cache, repo_id: str, source) -> Path:
    """Copy the checkpoint directory ``source`` into the Hugging Face cache directory ``cache`` as model
    ``repo_id`` at a made-up commit (``refs/main`` names it); return the snapshot directory."""
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
