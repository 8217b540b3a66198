"""Tiny Hugging Face models (built from configs, no weights) for the loom.torch tests."""

import torch
import transformers

VOCAB = 64


def configs():
    """name -> config, every model with 2 layers, width 32, 4 heads (2 key/value)."""
    common = dict(vocab_size=VOCAB, num_hidden_layers=2, attn_implementation="eager",
                  use_cache=False)
    decoder = dict(common, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                   num_key_value_heads=2)
    return {
        "llama": transformers.LlamaConfig(**decoder),
        "gpt2": transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                        n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                        attn_pdrop=0.0, attn_implementation="eager",
                                        use_cache=False),
        "qwen2": transformers.Qwen2Config(**decoder),
        "mistral": transformers.MistralConfig(**decoder, sliding_window=None),
        "mixtral": transformers.MixtralConfig(**decoder, num_local_experts=4,
                                              num_experts_per_tok=2, router_jitter_noise=0.0,
                                              sliding_window=None),
    }


def builder(name, dtype=torch.float64, seed=0):
    """A function that builds the model `name` with seeded random weights."""
    config = configs()[name]

    def build():
        torch.manual_seed(seed)
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return build


def batch(batch_size=2, seq=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch_size, seq), generator=g)
    labels = torch.randint(0, VOCAB, (batch_size, seq), generator=g)
    return lambda: {"input_ids": ids, "labels": labels}


def hf_loss(output):
    return output.loss


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=False)


def sgd(params):
    return torch.optim.SGD(params, lr=1e-2)
