"""A Qwen3-style tokenizer built offline: a byte-level BPE (the `tokenizers` library, trained on a small
corpus) with Qwen3's special tokens and Qwen3's chat template (qwen3_chat_template.jinja, the
`chat_template` of Qwen/Qwen3-0.6B's tokenizer_config.json on the Hugging Face Hub). Its merges differ
from Qwen3's, but it has what re-tokenisation drift comes from: multi-byte merges, a byte-level
alphabet, and added tokens (<|im_start|>, <tool_call>, ...) that the template writes as text."""
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
CORPUS = ["the answer is 42", "call the tool with the query", "search for the capital of france",
          "paris is the capital", "def f(x): return x + 1", '{"name": "lookup", "arguments": {"key": "abc"}}',
          "numbers 0123456789 and words", "user assistant system tool response"] * 20


def build_qwen3_tokenizer(vocab_size: int = 400):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])  # as Qwen3: not special
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = (Path(__file__).parent / "qwen3_chat_template.jinja").read_text()
    return fast
