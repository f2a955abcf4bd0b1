"""Build a tiny causal language model for the real-server tests, with no model hub: a
byte-level BPE tokenizer trained here on common English words, a chat template,
and a two-layer Llama with random weights (seeded, so every build is the same). Runs in the
real server's venv (torch, transformers, tokenizers).

    python build_tiny_model.py OUT_DIR [--hidden-size N]

--hidden-size (default 64) sets the width; with 4 heads each head is a quarter of it. vLLM's CPU
attention needs heads of 32 or more: the lab's real vLLM serves the 128-wide build
(tests/lab/vllm/setup.sh).

The answers are random text, which is all a benchmark and a probe of the API need: the
server still tokenizes, prefills, decodes and streams as it does for a real model."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

# Common English words, the kind sparkctl.bench's prompts are made of; words outside them
# fall apart into a few byte-level tokens each, as with a real English tokenizer.
WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but "
         "have an they you were her she there one all we their time people year way day man thing woman life "
         "child world school state family student group country problem hand part place case week company "
         "system program question work government number night point home water room mother area money story").split()
VOCAB_SIZE = 1024
SPECIAL = ["<unk>", "<s>", "</s>"]
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant: {% endif %}")


def build(out: Path, hidden_size: int = 64) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(64)) for _ in range(2000)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    config = LlamaConfig(vocab_size=len(fast), hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    # Greedy decoding of random weights tends to repeat one token, and for a chat prompt it
    # was a blank one: an answer of blanks reads as empty to a probe (temperature 0). Tokens
    # that decode to blanks get zero logits, below the random ones of every other token.
    blank = [i for i in range(len(fast)) if not fast.decode([i]).strip()]
    with torch.no_grad():
        model.lm_head.weight[blank] = 0.0
    # Sampled by default (the benchmark sends no temperature): varied text, as from a real model.
    model.generation_config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                               bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id)
    model.save_pretrained(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--hidden-size", type=int, default=64)
    args = parser.parse_args()
    build(args.out_dir, args.hidden_size)
