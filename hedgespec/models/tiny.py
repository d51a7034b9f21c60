"""The ``tiny`` target: a randomly initialised small ``LlamaForCausalLM`` for tests and CPU smoke runs.

Built in well under a second, deterministic for a seed, no files on disk. Its tokenizer is a byte-level BPE
trained with ``tokenizers`` on the fixed built-in corpus below (so it is identical on every machine) and it
uses the same ChatML chat template as SmolLM2, so prompts are formatted the same way for both targets.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .spec import TinyArch

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML, as in SmolLM2-Instruct (minus its default system prompt).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A small fixed corpus touching every domain, so the BPE merges are generic and deterministic.
_CORPUS = """\
def add(a, b):
    \"\"\"Return the sum of a and b.\"\"\"
    return a + b

for i in range(10):
    if i % 2 == 0:
        print(i)
class Stack:
    def __init__(self):
        self.items = []
    def push(self, item):
        self.items.append(item)
SELECT name, COUNT(*) FROM tracks WHERE milliseconds > 300000 GROUP BY album_id ORDER BY 2 DESC LIMIT 5;
CREATE TABLE artist (artist_id INTEGER PRIMARY KEY, name TEXT);
SELECT a.name FROM artist AS a JOIN album AS b ON a.artist_id = b.artist_id;
Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.
How many clips did Natalia sell altogether in April and May? 48/2 = <<48/2=24>>24 clips in May. #### 72
The mitochondrion is the organelle that produces ATP through oxidative phosphorylation.
A protein binds to DNA and regulates the transcription of a gene in the nucleus of the cell.
Sodium chloride, NaCl, has a molar mass of 58.44 g/mol; the element carbon has atomic number 6.
A 45-year-old patient presents with fever, joint pain and a rash. Which of the following is the most likely diagnosis?
A. Lupus B. Gout C. Psoriasis D. Lyme disease. Answer: A
Summarize the following news article. The government announced on Tuesday that the bushfires near Sydney
had been contained after firefighters worked through the night.
The capital of France is Paris. The quick brown fox jumps over the lazy dog. Hello! How can I help you today?
"""


@lru_cache(maxsize=4)
def _tokenizer_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines(keepends=True) * 4, trainer=trainer)
    return tok.to_str()


def build_tiny_tokenizer(vocab_size: int = 512) -> Any:
    """Byte-level BPE (``vocab_size`` >= 259: 256 bytes + 3 specials) with the ChatML template; offline, deterministic."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"tiny target vocab_size={vocab_size} is too small; need >= {256 + len(SPECIAL_TOKENS)}")
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json(vocab_size)),
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_target(arch: TinyArch | None = None, seed: int = 0, dtype: str = "float32", device: str = "cpu") -> tuple[Any, Any]:
    """Return ``(LlamaForCausalLM, tokenizer)`` with weights drawn from ``seed`` (global RNG state untouched)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    arch = arch or TinyArch()
    tok = build_tiny_tokenizer(arch.vocab_size)
    vocab = max(arch.vocab_size, len(tok))
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        max_position_embeddings=arch.max_position_embeddings,
        tie_word_embeddings=arch.tie_word_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    model = model.to(device=device, dtype=getattr(torch, dtype if dtype != "auto" else "float32"))
    model.eval()
    return model, tok
