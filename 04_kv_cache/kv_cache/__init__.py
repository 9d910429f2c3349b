# GENERATED from solutions/kv_cache/__init__.py by `course stubs --write`.
# Nothing to write here: given code of stage 04 (04_kv_cache/04_kv_cache.ipynb).
"""Stage 04: the KV cache — generate text without recomputing the past (lesson: 04_kv_cache.ipynb).

    attention.py        forward_cached: new tokens against a cache; prefill, chunks, decode  4.1
    concat_cache.py     ConcatKVCache: grows by torch.cat, the baseline                      4.2
    prealloc_cache.py   KVCache: preallocated buffers, written in place, read as views       4.3
    int8_cache.py       quantize_int8, dequantize_int8, QuantizedKVCache                     4.4
    sampling.py         sample: greedy, temperature, top-k, top-p (and check_sampling)       4.5
                        apply_repetition_penalty: CTRL's penalty on the tokens seen      4.7
    generation.py       generate, with any cache or none; generate_alone, the oracle         4.6
    weight_quant.py     quantize_int4, dequantize_int4, pack_int4, unpack_int4: INT4 groups  4.8
    quant_linear.py     quantize_weight, QuantLinear, quantize_model, weight_bytes           4.9
    calibrated_quant.py awq_search (AWQ, Lin et al. 2023), layer_inputs, awq_quantize        4.10
    gguf_reader.py      read_gguf, read_value: a GGUF file's metadata and tensors, mapped    4.11
    gguf_quants.py      dequantize_q8_0, dequantize_q4_1 (+ dequantize_tensor): blocks       4.12
    gguf_to_llama.py    hf_name, unpermute_qk, llama_state_dict: GGUF onto Llama's names     4.13
    smollm2.py          given: load_smollm2, render_chat: SmolLM2-135M-Instruct from its GGUF
    export_hf.py        given: export_llama: a Llama as a Hugging Face folder (safetensors)
    checkpoint_format.py given: save_safetensors, load_safetensors, read_safetensors
    tiny_gguf.py        given: write_llama_gguf: a tiny random Llama GGUF (gguf's writer), tokenizer optional
    decoder.py          given: check_decoder, kv_heads, embedding: a GPT or a Llama, the same pieces
    base.py             given: CacheProtocol (what a cache offers), CacheFullError, _CacheBase
    demo.py             given: demo()
    options.py          given: CACHES, GenerationResult, generate's argument checks
"""

from .attention import forward_cached
from .calibrated_quant import awq_quantize, awq_search, layer_inputs
from .checkpoint_format import load_safetensors, read_safetensors, save_safetensors
from .base import CacheFullError, CacheProtocol, _CacheBase
from .concat_cache import ConcatKVCache
from .decoder import DECODERS, Decoder, check_decoder, embedding, kv_heads
from .demo import demo
from .generation import generate, generate_alone
from .export_hf import ExportError, export_llama
from .gguf_quants import dequantize_q4_1, dequantize_q8_0, dequantize_tensor
from .gguf_reader import GGML_TYPES, GGUFFile, GGUFTensor, read_gguf, read_value, tensor_nbytes
from .gguf_to_llama import hf_name, llama_config, llama_state_dict, unpermute_qk
from .int8_cache import QuantizedKVCache, dequantize_int8, quantize_int8
from .options import CACHES, GenerationResult, check_generate
from .prealloc_cache import KVCache
from .quant_linear import QuantLinear, int8_kernel_available, quantize_model, quantize_weight, weight_bytes
from .sampling import apply_repetition_penalty, check_sampling, sample
from .smollm2 import gguf_tokenizer, llama_from_gguf, load_smollm2, render_chat, smollm2_path
from .tiny_gguf import TINY_VOCAB, tiny_tokenizer_metadata, write_llama_gguf
from .weight_quant import dequantize_int4, pack_int4, quantize_int4, unpack_int4

__all__ = [
    "forward_cached", "CacheFullError", "CacheProtocol", "_CacheBase", "ConcatKVCache", "KVCache",
    "QuantizedKVCache", "quantize_int8", "dequantize_int8", "sample", "check_sampling", "CACHES",
    "apply_repetition_penalty", "GenerationResult", "check_generate", "generate", "generate_alone", "demo",
    "quantize_int4", "dequantize_int4", "pack_int4", "unpack_int4", "quantize_weight", "QuantLinear",
    "quantize_model", "weight_bytes", "int8_kernel_available", "awq_search", "layer_inputs", "awq_quantize",
    "save_safetensors", "load_safetensors", "read_safetensors",
    "read_gguf", "read_value", "GGUFFile", "GGUFTensor", "GGML_TYPES", "tensor_nbytes", "dequantize_q8_0",
    "dequantize_q4_1", "dequantize_tensor", "hf_name", "unpermute_qk", "llama_state_dict", "llama_config",
    "load_smollm2", "llama_from_gguf", "gguf_tokenizer", "render_chat", "smollm2_path", "export_llama", "ExportError",
    "write_llama_gguf", "tiny_tokenizer_metadata", "TINY_VOCAB",
    "DECODERS", "Decoder", "check_decoder", "embedding", "kv_heads",
]
