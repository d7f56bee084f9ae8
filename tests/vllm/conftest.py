"""The separate vLLM test target (tools/test_vllm.sh); the default pytest run does not collect it
(pyproject: norecursedirs). Builds a tiny random-weight Llama model with an offline byte-level BPE
tokenizer, so the real engine runs without any download."""
import os

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in-process: simpler under pytest
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
    "{% if not (loop.last and m['role'] == 'assistant') %}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CORPUS = [
    "Find all integers n such that n^2 + n is even. Use parity: consecutive integers.",
    "Prove that the sum of the angles of a triangle is 180 degrees.",
    '{"noCoreIdea": false, "coreIdea": "Pair terms", "keywords": ["parity"], "confidence": 0.5}',
    "\\boxed{1} \\boxed{2} Candidate Reference Problem Solution true false null",
] * 20


def build_tiny_model(folder):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=special[2:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1,  # head_dim 64 (16 is unsupported on CPU)
                      max_position_embeddings=2048,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-llama")))
