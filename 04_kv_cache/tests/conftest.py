"""Shared fixtures of stage 04's tests: the models the caches are checked on.

- `tiny`: a small random GPT (2 layers, 2 heads of 16, context 64). Its logits come from
  the same code as the default model's; it keeps the many small property tests fast.
- `tiny_llama`: a small random Llama (RoPE, 4 query heads over 2 K/V heads), SmolLM2's shape
  in miniature; `decoder` is each of the two in turn.
- `trained`: the course's default model (`solutions.gpt.load_default()`), for the checks
  whose numbers only mean something on a trained model (INT8 agreement, transformers).

These models run thousands of tiny matrix products, where a second torch thread only adds
synchronisation (and, on a busy shared machine, waiting for a core): the stage's tests run
single-threaded, and put the thread count back afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from solutions.gpt import GPT, GPTConfig, load_default


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """Every test module here runs on one torch thread (the course plugin's `one_thread`)."""


@pytest.fixture(scope="session")
def tiny() -> GPT:
    torch.manual_seed(1234)
    return GPT(GPTConfig(block_size=64, n_layer=2, n_head=2, n_embd=32)).eval()


@pytest.fixture(scope="session")
def tiny_llama():
    """A small random Llama, SmolLM2's architecture in miniature: 2 layers, RoPE, 4 query heads
    over 2 K/V heads of 8, context 64, the byte vocabulary's 257 ids."""
    from solutions.train import random_llama

    return random_llama(vocab_size=257, std=0.3)


@pytest.fixture(scope="session", params=["gpt", "llama"])
def decoder(request, tiny, tiny_llama):
    """Each of the two decoders the engines run: `tiny` (GPT) and `tiny_llama` (RoPE, GQA)."""
    return tiny if request.param == "gpt" else tiny_llama


@pytest.fixture(scope="session")
def trained() -> GPT:
    model, _ = load_default()
    return model


# ---- GGUF files (exercises 4.11-4.13) --------------------------------------------------------
# Tiny Llama GGUF files are written by the `gguf` package (llama.cpp's own writer; given code,
# tiny_gguf.py), so the reader is checked on files it did not write; SmolLM2's real file is
# read ONCE per test run.

@pytest.fixture(scope="session")
def write_llama_gguf():
    """The package under test's `write_llama_gguf` (given code, tiny_gguf.py: a tiny random Llama
    GGUF written by gguf's GGUFWriter), through `course.load` as `smollm2_file`."""
    import course

    return course.load("kv_cache").write_llama_gguf


@pytest.fixture(scope="session")
def smollm2_file():
    """The installed wheel's GGUF file (`make install` installs it): given code of the package
    under test, through `course.load` (a release `--through 04` withholds solutions/kv_cache/)."""
    import course

    return course.load("kv_cache").smollm2_path()


@pytest.fixture(scope="session")
def smollm2_oracle(smollm2_file):
    """A function (built on its first call, as `smollm2`): (model, state dict), transformers'
    LlamaForCausalLM with the real file's parameters as transformers and gguf compute them, none of
    the learner's code involved: the bytes of each tensor as `gguf.GGUFReader` finds them,
    dequantised by `gguf.quants.dequantize`, named by gguf's own tensor-name map (what transformers'
    GGUF loader uses), Q and K un-permuted by transformers' `LlamaTensorProcessor`. (transformers'
    `from_pretrained(gguf_file=...)` runs these same steps; on the real file it costs ~40 s, so it
    runs on tiny files in test_gguf_mapping.py.)"""
    return _once(lambda: _oracle(smollm2_file))


def _oracle(smollm2_file):
    import gguf
    from transformers import LlamaConfig as HFConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = HFConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                   num_attention_heads=9, num_key_value_heads=3, head_dim=64, rms_norm_eps=9.999999747378752e-06,
                   rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, max_position_embeddings=8192,
                   tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    with torch.device("meta"):
        hf = LlamaForCausalLM(cfg)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    to_hf = {names.get_name(k[:-len(".weight")]) + ".weight": k for k in hf.state_dict()}
    processor = LlamaTensorProcessor(config=cfg.to_dict())
    sd = {}
    for t in _gguf_tensors(smollm2_file):
        w = processor.process(weights=gguf.quants.dequantize(t["data"], t["type"]), name=t["name"]).weights
        sd[to_hf[t["name"]]] = torch.from_numpy(np.array(w))
    hf.load_state_dict(sd, strict=False, assign=True)
    hf.tie_weights()
    hf.model.rotary_emb = LlamaRotaryEmbedding(cfg)
    return hf.eval(), sd


def _gguf_tensors(path):
    """Each tensor's name, type and bytes (shaped as gguf.quants.dequantize takes them) as
    gguf.GGUFReader finds them, without building its metadata fields (their 100,000 strings
    are most of its cost): the tensor infos are parsed by gguf's own reader class."""
    import struct

    import gguf

    class TensorsOnly(gguf.GGUFReader):
        def _build_fields(self, offs, count):  # step over the metadata (SmolLM2's has no general.alignment)
            for _ in range(count):
                (key_len,) = struct.unpack_from("<Q", self.data, offs)
                (vtype,) = struct.unpack_from("<I", self.data, offs + 8 + key_len)
                offs = self._skip_value(offs + 12 + key_len, vtype)
            return offs

        def _skip_value(self, offs, vtype):
            sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
            if vtype in sizes:
                return offs + sizes[vtype]
            if vtype == 8:
                return offs + 8 + struct.unpack_from("<Q", self.data, offs)[0]
            item, count = struct.unpack_from("<IQ", self.data, offs)
            offs += 12
            if item in sizes:
                return offs + sizes[item] * count
            for _ in range(count):
                offs = self._skip_value(offs, item)
            return offs

    return [{"name": t.name, "type": t.tensor_type, "data": t.data} for t in TensorsOnly(str(path)).tensors]


@pytest.fixture(scope="session")
def smollm2_gguf(smollm2_file):
    """A function: the real file read by the package under test's `read_gguf` (memory-mapped:
    cheap), read on the first call, the same object after. (The learner's code runs in the
    tests that call it, never in a fixture's set-up: an unwritten exercise fails the test.)"""
    import course

    return _once(lambda: course.load("kv_cache").read_gguf(smollm2_file))


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf):
    """A function: (gguf file, model, tokenizer) of the package under test, `load_smollm2()`
    (float32, CPU) run on the first call only, beside the file `smollm2_gguf` read."""
    import course

    return _once(lambda: (smollm2_gguf(), *course.load("kv_cache").load_smollm2()))


def _once(make):
    """`make()` on the first call that succeeds, its result on every later call."""
    done = []

    def get():
        if not done:
            done.append(make())
        return done[0]

    return get
