"""The report on a Llama (issue 30; given code, `decode_floor.py`): FLOPs and bytes of a
Llama's step by hand and against torch's FlopCounterMode, SmolLM2's parameter bytes from its
shapes, the floor of a decode step, and `collect` + `floor_section` on a tiny random Llama
(SmolLM2's architecture in miniature: RoPE, 4 query heads over 2 K/V heads). SmolLM2 itself
is not loaded: `course profile --model smollm2` is its run (08_profiling/README.md)."""


import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import course
from solutions.kv_cache import KVCache, forward_cached
from solutions.train import LlamaConfig, random_llama

pytestmark = pytest.mark.given
prof = course.load("profiling")

# V = 13, C = 8 (4 heads of 2, 2 K/V heads: H_kv·D = 4), F = 12, one layer, context 32
TINY = LlamaConfig(vocab_size=13, dim=8, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=12, max_seq_len=32)
# SmolLM2-135M-Instruct's shapes (its GGUF's metadata): 134,515,008 parameters, tied head
SMOLLM2 = LlamaConfig(vocab_size=49152, dim=576, n_layers=30, n_heads=9, n_kv_heads=3, hidden_dim=1536,
                      max_seq_len=8192, rope_theta=100000.0)


def test_llama_terms_by_hand():
    # batch 2, 3 new tokens after 5: N = 6, L = 8
    c = prof.llama_step_cost(TINY, batch=2, new_tokens=3, context=5)
    expected = {
        "matmul": 2 * 6 * (2 * 64 + 2 * 8 * 4 + 3 * 8 * 12) + 2 * 6 * 8 * 13,  # q, o; k, v; gate, up, down; head
        "attention": 2 * (2 * 6 * 8 * 8),  # over all 4 query heads: GQA saves bytes, not FLOPs
        "weights": 4 * (2 * 64 + 2 * 8 * 4 + 3 * 8 * 12 + 2 * 8 + 8 + 13 * 8),  # tied: the table once, as the head
        "kv_read": 4 * 2 * 2 * 8 * 4,  # every row's L keys and values of the 2 K/V heads, not the 4 query heads
        "kv_write": 4 * 2 * 6 * 4,
    }
    wrong = {k: (c.detail[k], v) for k, v in expected.items() if c.detail[k] != v}
    assert not wrong, f"llama_step_cost's terms (got, expected): {wrong}"
    assert (c.flops, c.bytes) == (expected["matmul"] + expected["attention"],
                                  expected["weights"] + expected["kv_read"] + expected["kv_write"])
    untied = prof.llama_step_cost(LlamaConfig(**{**vars(TINY), "tie_embeddings": False}), batch=2, new_tokens=3,
                                  context=5)
    assert untied.detail["weights"] - c.detail["weights"] == 4 * 6 * 8, \
        "untied, the head's matrix is read whole and the embedding only in its N looked-up rows"
    with pytest.raises(ValueError, match="exceeds"):
        prof.llama_step_cost(TINY, batch=1, new_tokens=2, context=31)


def test_smollm2_weight_bytes_are_its_parameters():
    c = prof.llama_step_cost(SMOLLM2, batch=1, new_tokens=1, context=0)
    assert c.detail["weights"] == 134_515_008 * 4, \
        "a decode step of SmolLM2 reads each of its 134,515,008 parameters once (538 MB in float32)"
    assert c.detail["kv_read"] + c.detail["kv_write"] == 2 * 46_080, \
        "SmolLM2 caches 46,080 bytes a token in float32 (2 x 30 layers x 3 K/V heads x 64 x 4)"


@pytest.mark.parametrize("batch, new, context", [(1, 1, 6), (2, 3, 0), (3, 1, 4)])
def test_llama_matmul_flops_match_torch_flop_counter(batch, new, context):
    """FlopCounterMode's aten.mm / addmm are the Linears and the head (attention runs as bmm or
    the CPU attention kernel: not those)."""
    m = random_llama(vocab_size=13, dim=8, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=12, max_seq_len=32)
    cache = KVCache.for_model(m, batch)
    if context:
        forward_cached(m, torch.randint(0, 13, (batch, context)), cache)
    with FlopCounterMode(display=False) as fc:
        forward_cached(m, torch.randint(0, 13, (batch, new)), cache)
    counts = fc.get_flop_counts()["Global"]
    linears = sum(v for op, v in counts.items() if str(op).split(".")[1] in ("mm", "addmm"))
    assert prof.llama_step_cost(m.config, batch=batch, new_tokens=new, context=context).detail["matmul"] == \
        linears, f"the Linears and the head as FlopCounterMode counts them (aten.mm / addmm): {counts}"
    assert prof.model_step_cost(m.config, batch=batch, new_tokens=new, context=context) == \
        prof.llama_step_cost(m.config, batch=batch, new_tokens=new, context=context)


def test_decode_floor():
    f = prof.decode_floor(2e8, 0.04, 1e10)
    assert f == {"bytes": 2e8, "floor_s": 0.02, "step_s": 0.04, "of_floor": 0.5, "bandwidth": 1e10}, \
        "the floor is bytes / bandwidth, and a step's share of it floor / measured seconds"
    for bad in ((0, 1, 1), (1, 0, 1), (1, 1, -2)):
        with pytest.raises(ValueError):
            prof.decode_floor(*bad)
