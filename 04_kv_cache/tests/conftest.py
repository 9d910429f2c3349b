"""Shared fixtures of stage 04's tests: the models the caches are checked on.

- `tiny`: a small random GPT (2 layers, 2 heads of 16, context 64). Its logits come from
  the same code as the default model's; it keeps the many small property tests fast.
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
def trained() -> GPT:
    model, _ = load_default()
    return model


# ---- GGUF files (exercises 4.11-4.13) --------------------------------------------------------
# Tiny Llama GGUF files are written by the `gguf` package (llama.cpp's own writer), so the reader
# is checked on files it did not write; SmolLM2's real file is read ONCE per test run.

def write_llama_gguf(path, *, n_layer=2, dim=64, n_head=4, n_kv=2, ffn=96, vocab=96, types=None,
                     alignment=None, extra=None, seed=0, context=128):
    """A Llama GGUF at `path` with random weights: `types` maps a tensor part ("token_embd",
    "attn_q", ...) to a GGMLQuantizationType (default F32; norms always F32); `alignment` a
    custom general.alignment; `extra` more metadata (key -> (value, GGUFValueType))."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_context_length(context)
    w.add_embedding_length(dim)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(dim // n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(0)
    for key, (value, vtype) in (extra or {}).items():
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(key, value)
        else:
            w.add_key_value(key, value, vtype)
    hd = dim // n_head
    shapes = {"token_embd.weight": (vocab, dim), "output_norm.weight": (dim,)}
    for i in range(n_layer):
        shapes.update({f"blk.{i}.attn_norm.weight": (dim,), f"blk.{i}.attn_q.weight": (n_head * hd, dim),
                       f"blk.{i}.attn_k.weight": (n_kv * hd, dim), f"blk.{i}.attn_v.weight": (n_kv * hd, dim),
                       f"blk.{i}.attn_output.weight": (dim, dim), f"blk.{i}.ffn_norm.weight": (dim,),
                       f"blk.{i}.ffn_gate.weight": (ffn, dim), f"blk.{i}.ffn_up.weight": (ffn, dim),
                       f"blk.{i}.ffn_down.weight": (dim, ffn)})
    for name, shape in shapes.items():
        if len(shape) == 1:
            x, qt = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32), gguf.GGMLQuantizationType.F32
        else:
            x = (0.3 * rng.standard_normal(shape)).astype(np.float32)
            qt = (types or {}).get(name.split(".")[-2], gguf.GGMLQuantizationType.F32)
        w.add_tensor(name, gguf.quants.quantize(x, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="session", name="write_llama_gguf")
def _write_llama_gguf():
    """`write_llama_gguf` above, for the tests (a conftest is not importable by name)."""
    return write_llama_gguf


@pytest.fixture(scope="session")
def smollm2_file():
    """The installed wheel's GGUF file (`make install` installs it): given code of the package
    under test, through `course.load` (a release `--through 04` withholds solutions/kv_cache/)."""
    import course

    return course.load("kv_cache").smollm2_path()


@pytest.fixture(scope="session")
def smollm2_oracle(smollm2_file):
    """A function (built on its first call, as `smollm2`): (model, state dict), transformers' LlamaForCausalLM with the real file's parameters as transformers and gguf
    compute them, none of the learner's code involved: the bytes of each tensor as
    `gguf.GGUFReader` finds them, dequantised by `gguf.quants.dequantize`, named by gguf's own
    tensor-name map (what transformers' GGUF loader uses), Q and K un-permuted by transformers'
    `LlamaTensorProcessor`. (transformers' `from_pretrained(gguf_file=...)` runs these same
    steps; on the real file it costs ~40 s, so it runs on tiny files in test_gguf_mapping.py.)"""
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
