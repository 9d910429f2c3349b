"""Stage 04: the KV cache — generate text without recomputing the past (lesson: 04_kv_cache.ipynb).

    attention.py        forward_cached: new tokens against a cache; prefill, chunks, decode  4.1
    concat_cache.py     ConcatKVCache: grows by torch.cat, the baseline                      4.2
    prealloc_cache.py   KVCache: preallocated buffers, written in place, read as views       4.3
    int8_cache.py       quantize_int8, dequantize_int8, QuantizedKVCache                     4.4
    sampling.py         sample: greedy, temperature, top-k, top-p (and check_sampling)       4.5
    generation.py       generate, with any cache or none; generate_alone, the oracle         4.6
    base.py             given: CacheProtocol (what a cache offers), CacheFullError, _CacheBase
    demo.py             given: demo()
    options.py          given: CACHES, GenerationResult, generate's argument checks
"""

from .attention import forward_cached
from .base import CacheFullError, CacheProtocol, _CacheBase
from .concat_cache import ConcatKVCache
from .demo import demo
from .generation import generate, generate_alone
from .int8_cache import QuantizedKVCache, dequantize_int8, quantize_int8
from .options import CACHES, GenerationResult, check_generate
from .prealloc_cache import KVCache
from .sampling import check_sampling, sample

__all__ = [
    "forward_cached", "CacheFullError", "CacheProtocol", "_CacheBase", "ConcatKVCache", "KVCache",
    "QuantizedKVCache", "quantize_int8", "dequantize_int8", "sample", "check_sampling", "CACHES",
    "GenerationResult", "check_generate", "generate", "generate_alone", "demo",
]
