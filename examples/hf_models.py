"""Small Hugging Face transformers models for the tests and benchmarks of torch_ext: GPT-2,
LLaMA, BERT and T5 built from configs (random weights, nothing downloaded), with eager or sdpa
attention, each trained with its own loss (``labels=``).

Needs the ``hf`` extra (transformers); :func:`available` says whether it is installed.
"""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODELS = ("gpt2", "llama", "bert", "t5")
ATTENTIONS = ("eager", "sdpa")
#: Per size: layers, width, heads, MLP width, vocabulary, batch, tokens.
SIZES = {"test": dict(layers=2, dim=64, heads=4, hidden=128, vocab=128, batch=2, tokens=16),
         "cpu": dict(layers=4, dim=256, heads=4, hidden=1024, vocab=1024, batch=2, tokens=256)}


def available():
    """Whether transformers is installed (the ``hf`` extra)."""
    return importlib.util.find_spec("transformers") is not None


def _config(name, attention, s):
    import transformers as tf

    if name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=s["vocab"], n_embd=s["dim"], n_layer=s["layers"],
                            n_head=s["heads"], n_inner=s["hidden"], n_positions=s["tokens"],
                            bos_token_id=0, eos_token_id=0)
    elif name == "llama":
        cfg = tf.LlamaConfig(vocab_size=s["vocab"], hidden_size=s["dim"],
                             intermediate_size=s["hidden"], num_hidden_layers=s["layers"],
                             num_attention_heads=s["heads"], num_key_value_heads=s["heads"] // 2,
                             max_position_embeddings=s["tokens"])
    elif name == "bert":
        cfg = tf.BertConfig(vocab_size=s["vocab"], hidden_size=s["dim"],
                            num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                            intermediate_size=s["hidden"], max_position_embeddings=s["tokens"])
    elif name == "t5":
        cfg = tf.T5Config(vocab_size=s["vocab"], d_model=s["dim"], d_kv=s["dim"] // s["heads"],
                          d_ff=s["hidden"], num_layers=s["layers"],
                          num_decoder_layers=s["layers"], num_heads=s["heads"],
                          decoder_start_token_id=0, pad_token_id=0)
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")
    cfg._attn_implementation = attention
    return cfg


def build(name, attention="eager", size="test", seed=0):
    """``(model, step)``: the model `name` in training mode and a step that returns its loss
    on a fixed random batch (token ids, labels), ``step(attention_mask=None)``: a mask of ones
    where None (no padding)."""
    if attention not in ATTENTIONS:
        raise ValueError(f"unknown attention {attention!r}; expected one of {ATTENTIONS}")
    import torch

    from torch_models import import_torchvision

    import_torchvision()   # transformers imports torchvision where it is installed
    import transformers as tf

    classes = {"gpt2": tf.GPT2LMHeadModel, "llama": tf.LlamaForCausalLM,
               "bert": tf.BertForMaskedLM, "t5": tf.T5ForConditionalGeneration}
    s = SIZES[size]
    torch.manual_seed(seed)
    model = classes[name](_config(name, attention, s)).train()
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, s["vocab"], (s["batch"], s["tokens"]), generator=gen)
    mask = torch.ones_like(ids)
    labels = torch.randint(1, s["vocab"], (s["batch"], s["tokens"]), generator=gen)

    def step(attention_mask=None):
        attention_mask = mask if attention_mask is None else attention_mask
        return model(input_ids=ids, attention_mask=attention_mask, labels=labels).loss

    return model, step


def padding_mask(size="test", padded=((0, 3),)):
    """An attention mask for :func:`build`'s batch of `size`: ones, but zeros on the last
    ``n`` tokens of each ``(row, n)`` of `padded` (a batch of padded texts)."""
    import torch

    s = SIZES[size]
    mask = torch.ones(s["batch"], s["tokens"], dtype=torch.long)
    for row, n in padded:
        mask[row, s["tokens"] - n:] = 0
    return mask
