# GENERATED from solutions/train/llama.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""A Llama-family decoder (given code): exercises 3.15-3.18 composed, with Hugging Face's names.

`Llama(config).state_dict()` has exactly the keys of `transformers`' `LlamaForCausalLM`
(`model.embed_tokens.weight`, `model.layers.{i}.self_attn.{q,k,v,o}_proj.weight`,
`model.layers.{i}.mlp.{gate,up,down}_proj.weight`, `model.layers.{i}.{input,post_attention}_layernorm.weight`,
`model.norm.weight`, `lm_head.weight`), in its order, so its weights load either way. Tied
embeddings share one Parameter, and `lm_head.weight` is still a key, as it is in Hugging Face's.

The GPT's pieces (solutions/gpt.py), but `qkv` takes positions and K/V have n_kv_heads; an engine runs:

    x = model.embed(idx)                                     # (B, T, C): no positions here
    for block in model.blocks:
        q, k, v = block.attn.qkv(block.ln_1(x), positions)   # q (B, H, T, D); k, v (B, H_kv, T, D), rotated
        ... store k, v; y = block.attn.attend(q, K, V, mask=...)  # (B, H, T, D) ...
        x = x + block.attn.out(y)                            # (B, T, C)
        x = x + block.mlp(block.ln_2(x))
    logits = model.head(x)                                   # (B, T, V)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from solutions.checks import check_int

from .arguments import check_positive
from .gqa import grouped_query_attention
from .rmsnorm import RMSNorm
from .rope import apply_rope
from .swiglu import SwiGLU


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    dim: int  # the residual stream's width (Hugging Face: hidden_size)
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads; divides n_heads (== n_heads: multi-head attention)
    hidden_dim: int  # the SwiGLU's inner width (Hugging Face: intermediate_size)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048  # positions 0..max_seq_len-1 (RoPE has no table; a stated limit)
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "hidden_dim", "max_seq_len"):
            check_int(f"LlamaConfig.{name}", getattr(self, name), 1)
        check_positive(norm_eps=self.norm_eps, rope_theta=self.rope_theta)
        if self.dim % self.n_heads or (self.dim // self.n_heads) % 2:
            raise ValueError(f"dim ({self.dim}) must be n_heads ({self.n_heads}) times an even head_dim")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})")
        if type(self.tie_embeddings) is not bool:
            raise TypeError(f"tie_embeddings must be a bool, got {self.tie_embeddings!r}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    # the names GPTConfig gives these, which the engines of stages 04-08 read
    @property
    def n_layer(self) -> int:
        return self.n_layers

    @property
    def block_size(self) -> int:
        return self.max_seq_len

    @classmethod
    def from_hf(cls, c) -> LlamaConfig:
        """From a `transformers.LlamaConfig` (or any config with its fields); what this model
        cannot compute exactly (biases, another activation or RoPE type, an odd head_dim) is refused."""
        heads = c.num_attention_heads
        rope = dict(getattr(c, "rope_parameters", None) or {})
        theta = rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))
        scaling = getattr(c, "rope_scaling", None)
        kind = rope.get("rope_type", (scaling or {}).get("rope_type", "default"))
        problems = [f"{what} {value!r}" for what, value, ok in (
            ("hidden_act", getattr(c, "hidden_act", "silu"), getattr(c, "hidden_act", "silu") == "silu"),
            ("rope_type", kind, kind == "default"),
            ("attention_bias", getattr(c, "attention_bias", False), not getattr(c, "attention_bias", False)),
            ("mlp_bias", getattr(c, "mlp_bias", False), not getattr(c, "mlp_bias", False)),
            ("head_dim", getattr(c, "head_dim", None),
             getattr(c, "head_dim", None) in (None, c.hidden_size // heads))) if not ok]
        if problems:
            raise ValueError(f"this Llama computes only the plain architecture; the config has {', '.join(problems)}")
        return cls(vocab_size=c.vocab_size, dim=c.hidden_size, n_layers=c.num_hidden_layers, n_heads=heads,
                   n_kv_heads=getattr(c, "num_key_value_heads", None) or heads, hidden_dim=c.intermediate_size,
                   norm_eps=float(c.rms_norm_eps), rope_theta=float(theta),
                   max_seq_len=int(c.max_position_embeddings), tie_embeddings=bool(c.tie_word_embeddings))

    def to_hf(self):
        """The equivalent `transformers.LlamaConfig`."""
        from transformers import LlamaConfig as HFLlamaConfig

        return HFLlamaConfig(vocab_size=self.vocab_size, hidden_size=self.dim, intermediate_size=self.hidden_dim,
                             num_hidden_layers=self.n_layers, num_attention_heads=self.n_heads,
                             num_key_value_heads=self.n_kv_heads, head_dim=self.head_dim, hidden_act="silu",
                             max_position_embeddings=self.max_seq_len, rms_norm_eps=self.norm_eps,
                             rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
                             tie_word_embeddings=self.tie_embeddings, attention_bias=False, mlp_bias=False)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.n_kv_heads
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_theta
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, C), positions (B, T) -> q (B, H, T, D), k and v (B, H_kv, T, D); q and k rotated."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(q, positions, self.theta), apply_rope(k, positions, self.theta), v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | None = None,
               is_causal: bool = False) -> torch.Tensor:
        """(B, H, T, D) queries over (B, H_kv, S, D) keys and values -> (B, H, T, D): exercise 3.18."""
        return grouped_query_attention(q, k, v, mask=mask, is_causal=is_causal)

    def out(self, y: torch.Tensor) -> torch.Tensor:
        """(B, H, T, D) -> (B, T, C): merge the heads and project."""
        B, H, T, D = y.shape
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * D))

    def forward(self, x, positions, *, mask=None, is_causal=True):
        q, k, v = self.qkv(x, positions)
        return self.out(self.attend(q, k, v, mask=mask, is_causal=is_causal and mask is None))


class LlamaBlock(nn.Module):
    """Pre-norm: x + attn(RMSNorm(x)), then + SwiGLU(RMSNorm(x)). Submodules in Hugging Face's order."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.mlp = SwiGLU(cfg.dim, cfg.hidden_dim)
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)

    # GPT's Block names: the engines' verbs (properties: no extra state-dict keys)
    attn = property(lambda self: self.self_attn)
    ln_1 = property(lambda self: self.input_layernorm)
    ln_2 = property(lambda self: self.post_attention_layernorm)

    def forward(self, x, positions, *, mask=None, is_causal=True):
        x = x + self.self_attn(self.input_layernorm(x), positions, mask=mask, is_causal=is_causal)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """forward(idx (B, T) int, positions (B, T) int | None, attention_mask (B, T) | None) -> logits (B, T, V).

    attention_mask: 1/True for real tokens, 0/False for padding (left or right; Hugging Face's
    convention). Key j is visible to query i of row b iff j <= i and token j is real; positions
    default to 0..T-1 in every row, or, with a mask, to each row's count of real tokens before
    it (Hugging Face's `generate` rule: left padding does not shift a row's positions). Logits
    of padded positions are unspecified (finite: a pad attends to itself). ValueError: idx not
    (B, T), positions or mask not (B, T), a position outside 0..max_seq_len-1.
    """

    def __init__(self, config: LlamaConfig):
        super().__init__()
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
        self.config = cfg = config
        self.model = nn.ModuleDict(dict(
            embed_tokens=nn.Embedding(cfg.vocab_size, cfg.dim),
            layers=nn.ModuleList(LlamaBlock(cfg) for _ in range(cfg.n_layers)),
            norm=RMSNorm(cfg.dim, cfg.norm_eps),
        ))
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:  # GPT-2's init, the projections into the residual stream scaled down
                into_residual = name.endswith(("o_proj.weight", "down_proj.weight"))
                std = 0.02 / math.sqrt(2 * cfg.n_layers) if into_residual else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
        self.tie_weights()
        self.register_load_state_dict_pre_hook(_tied_head)

    def tie_weights(self) -> None:
        """With tie_embeddings, make lm_head.weight the embedding's Parameter (again, after
        `load_state_dict(..., assign=True)`, which gives each key its own)."""
        if self.config.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @classmethod
    def from_hf_config(cls, hf_config) -> Llama:
        """A freshly initialised model of a `transformers.LlamaConfig`'s shape."""
        return cls(LlamaConfig.from_hf(hf_config))

    @classmethod
    def from_hf(cls, hf) -> Llama:
        """A copy of a `transformers.LlamaForCausalLM`'s weights, in eval mode."""
        model = cls.from_hf_config(hf.config)
        model.load_state_dict(hf.state_dict())
        return model.eval()

    def to_hf(self):
        """A `transformers.LlamaForCausalLM` with these weights, in eval mode."""
        from transformers import LlamaForCausalLM

        hf = LlamaForCausalLM(self.config.to_hf())
        hf.load_state_dict(self.state_dict())
        return hf.eval()

    @property
    def blocks(self) -> nn.ModuleList:
        return self.model.layers

    def num_params(self) -> int:
        """Parameters counted once (a tied head is the embedding)."""
        return sum(p.numel() for p in self.parameters())

    def embed(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings (B, T, C). Positions are not added here (RoPE rotates q and k in
        `qkv`); given, they are checked as `forward` checks them, as GPT.embed(idx, pos) does."""
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
            raise ValueError(f"idx must be (batch, time), got shape {tuple(getattr(idx, 'shape', ()))}")
        if idx.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"idx must hold integer token ids, got {idx.dtype}")
        if positions is not None:
            self._check_positions(positions, *idx.shape)
        return self.model.embed_tokens(idx)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Final RMSNorm and the output projection: (B, T, C) -> (B, T, V)."""
        return self.lm_head(self.model.norm(x))

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed(idx)
        B, T = idx.shape
        mask = None
        if attention_mask is not None:
            if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != (B, T):
                raise ValueError(f"attention_mask must be (batch, time) = ({B}, {T}), "
                                 f"got {tuple(getattr(attention_mask, 'shape', ()))}")
            real = attention_mask.to(device=idx.device) != 0
            if positions is None:
                positions = (real.long().cumsum(-1) - 1).clamp(min=0)
            causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
            eye = torch.eye(T, dtype=torch.bool, device=idx.device)
            mask = ((causal & real[:, None, :]) | eye)[:, None]  # (B, 1, T, T)
        elif positions is None:
            positions = torch.arange(T, device=idx.device).expand(B, T)
        self._check_positions(positions, B, T)
        for block in self.blocks:
            x = block(x, positions, mask=mask, is_causal=mask is None)
        return self.head(x)

    def _check_positions(self, positions, B: int, T: int) -> None:
        if not isinstance(positions, torch.Tensor) or tuple(positions.shape) != (B, T):
            got = tuple(getattr(positions, "shape", ()))
            raise ValueError(f"positions must be (batch, time) = ({B}, {T}), got {got}")
        if positions.dtype.is_floating_point or positions.dtype == torch.bool:
            raise TypeError(f"positions must be integers, got {positions.dtype}")
        if positions.numel() and not 0 <= int(positions.min()) <= int(positions.max()) < self.config.max_seq_len:
            raise ValueError(f"positions must lie in the model's context 0..{self.config.max_seq_len - 1}, got "
                             f"{int(positions.min())}..{int(positions.max())}")


def _tied_head(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """A tied model takes a state dict with or without `lm_head.weight`; with it, it must equal
    the embedding (else one of the two would be dropped without a word)."""
    if not module.config.tie_embeddings:
        return
    emb, head = prefix + "model.embed_tokens.weight", prefix + "lm_head.weight"
    if emb in state_dict and head not in state_dict:
        state_dict[head] = state_dict[emb]
    elif emb in state_dict and not torch.equal(state_dict[emb].to(state_dict[head]), state_dict[head]):
        error_msgs.append(f"{head} differs from {emb}, but the model ties them (LlamaConfig.tie_embeddings)")


def random_llama(*, seed: int = 1234, std: float = 0.5, dtype: torch.dtype = torch.float32, **config) -> Llama:
    """A small Llama with random weights (std `std`, norm gains near 1), for testing the machinery
    around a model, as `solutions.gpt.random_gpt`. `config` overrides LlamaConfig's fields of
    the default: vocab 64, dim 32, 2 layers, 4 query heads over 2 KV heads, hidden 48, context 64.
    Seeds torch's global generator with `seed`."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(**(dict(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48,
                              max_seq_len=64) | config))
    model = Llama(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if p.dim() == 1 else torch.randn_like(p) * std)
    return model.to(dtype).eval()
