"""The course's model: a GPT-2-architecture decoder, shared by stages 03–08 (given code).

Architecture (exactly GPT-2's, so weights convert to and from `transformers`):
token embedding `wte` + learned absolute position embedding `wpe`, then `n_layer` blocks
of pre-LayerNorm attention and MLP with residual connections, a final LayerNorm `ln_f`,
and an output head `lm_head` whose weight IS `wte.weight` (tied). Linear layers have
biases; the MLP uses GELU with the tanh approximation (GPT-2's "gelu_new").

Attention is split into pieces (`qkv`, then the attention itself, then `out`) so that
stage 04's cached attention reuses this module's weights and code instead of copying them:

    x = model.embed(idx, pos)                       # (B, T, C)
    for block in model.blocks:
        q, k, v = block.attn.qkv(block.ln_1(x))     # each (B, H, T, D)
        ...  store k, v; attend over the cache ...
        x = x + block.attn.out(y)                   # y: (B, H, T, D)
        x = x + block.mlp(block.ln_2(x))
    logits = model.head(x)                          # (B, T, V)
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from solutions.fileio import load_checked, save_checked
from solutions.tokenizer import VOCAB_SIZE, ByteTokenizer
from solutions.weightless import weightless

ASSETS = Path(__file__).resolve().parent / "assets"
DEFAULT_WEIGHTS = ASSETS / "gpt_default.pt"


@dataclass
class GPTConfig:
    vocab_size: int = VOCAB_SIZE
    block_size: int = 256  # the longest context (number of learned positions)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    layer_norm_epsilon: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {v!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)  # q, k, v in one matmul
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def qkv(self, x: torch.Tensor,
            positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T, C) -> q, k, v, each (B, H, T, D). `positions` is not used: GPT adds its
        positions at the embedding (the engines pass them to every decoder; Llama's rotate)."""
        B, T, C = x.shape
        qkv = self.c_attn(x).view(B, T, 3, self.n_head, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def out(self, y: torch.Tensor) -> torch.Tensor:
        """(B, H, T, D) -> (B, T, C): merge the heads and project."""
        B, H, T, D = y.shape
        return self.c_proj(y.transpose(1, 2).reshape(B, T, H * D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        return self.out(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    """GPT-2-architecture language model. `forward(idx)`: (B, T) int64 ids -> (B, T, V) logits."""

    def __init__(self, cfg: GPTConfig | None = None):
        super().__init__()
        self.config = cfg = cfg or GPTConfig()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer)),
            ln_f=nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied input/output embedding
        self.apply(self._init_weights)
        # GPT-2's scaled init of the projections that write into the residual stream
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.transformer.h

    def num_params(self) -> int:
        """Parameters counted once (the tied head is the embedding)."""
        return sum(p.numel() for p in self.parameters())

    def embed(self, idx: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        """Token + position embeddings. idx (B, T); pos (T,) or (B, T), default 0..T-1."""
        if idx.dim() != 2:
            raise ValueError(f"idx must be (batch, time), got shape {tuple(idx.shape)}")
        if idx.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"idx must hold integer token ids, got {idx.dtype}")
        T = idx.shape[1]
        if pos is None:
            if T > self.config.block_size:
                raise ValueError(f"sequence length {T} exceeds the model's context {self.config.block_size}")
            pos = torch.arange(T, device=idx.device)
        elif pos.numel() and int(pos.max()) >= self.config.block_size:
            raise ValueError(f"position {int(pos.max())} exceeds the model's context {self.config.block_size}")
        return self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Final LayerNorm and the tied output projection: (B, T, C) -> (B, T, V)."""
        return self.lm_head(self.transformer.ln_f(x))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    # ---- conversion to and from transformers' GPT2LMHeadModel -------------------------
    # GPT-2's checkpoints store c_attn/c_proj/c_fc as Conv1D, whose weight is (in, out):
    # the transpose of nn.Linear's (out, in). Everything else maps one to one.
    _TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

    def hf_config(self):
        from transformers import GPT2Config

        c = self.config
        return GPT2Config(vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.n_embd,
                          n_layer=c.n_layer, n_head=c.n_head, activation_function="gelu_new",
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                          layer_norm_epsilon=c.layer_norm_epsilon, bos_token_id=VOCAB_SIZE - 1,
                          eos_token_id=VOCAB_SIZE - 1, tie_word_embeddings=True)

    def to_hf(self):
        """A `transformers.GPT2LMHeadModel` with exactly these weights (in eval mode)."""
        from transformers import GPT2LMHeadModel

        hf = GPT2LMHeadModel(self.hf_config())
        sd = {}
        for k, v in self.state_dict().items():
            if k == "lm_head.weight":
                continue
            sd[k] = v.t().contiguous() if k.endswith(self._TRANSPOSED) else v.clone()
        missing, unexpected = hf.load_state_dict(sd, strict=False)
        missing = [k for k in missing if k != "lm_head.weight" and not k.endswith((".attn.bias", ".attn.masked_bias"))]
        if missing or unexpected:
            raise RuntimeError(f"weight conversion mismatch: missing {missing}, unexpected {unexpected}")
        hf.tie_weights()
        return hf.eval()

    @classmethod
    def from_hf(cls, hf) -> GPT:
        """A course GPT with the weights of a `transformers.GPT2LMHeadModel`."""
        c = hf.config
        act = getattr(c, "activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"only GPT-2's tanh GELU converts exactly, got activation {act!r}")
        model = cls(GPTConfig(vocab_size=c.vocab_size, block_size=c.n_positions, n_layer=c.n_layer,
                              n_head=c.n_head, n_embd=c.n_embd, layer_norm_epsilon=c.layer_norm_epsilon))
        sd = {}
        for k, v in hf.state_dict().items():
            if k.endswith((".attn.bias", ".attn.masked_bias")) or k == "lm_head.weight":
                continue
            sd[k] = v.t().contiguous() if k.endswith(cls._TRANSPOSED) else v.clone()
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
        model.load_state_dict(sd)
        return model.eval()


def on_one_thread(fn):
    """Decorator: run `fn` with torch on one thread, then restore the caller's thread count.

    The course's models are small: a decode step is ~100 operations on tiny matrices, where
    a second thread only adds synchronisation (and, on a busy machine, waiting). The demos
    run this way, as the benches and tests do.
    """

    @functools.wraps(fn)
    def run(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return run


def random_gpt(context: int, *, seed: int = 1234, std: float = 0.5, dtype: torch.dtype = torch.float32,
               n_layer: int = 2, n_head: int = 2, n_embd: int = 32) -> GPT:
    """A tiny GPT with random weights, for testing the machinery around a model (caches,
    schedulers, servers) rather than the model.

    Its matrices are drawn with standard deviation `std`, not GPT-2's 0.02: a tiny model
    initialised the GPT-2 way predicts much the same token whatever the context, which would
    hide a request that reads another request's cache row or the wrong position. With std
    0.5 the next token depends on the context, and in float64 its top logits lie far apart
    next to the ~1e-15 that batching or paging changes, so outputs can be compared exactly.
    Seeds torch's global generator with `seed` (the same weights on every call).
    """
    torch.manual_seed(seed)
    model = GPT(GPTConfig(block_size=context, n_layer=n_layer, n_head=n_head, n_embd=n_embd)).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std)
    return model


# ---- the course's default model -----------------------------------------------------------

def save_checkpoint(model: GPT, path: str | Path, meta: dict | None = None, half: bool = True) -> Path:
    """Save config + weights (+ meta: how it was trained) in one file; fp16 keeps it small.

    Written atomically with a checksum of its contents (`solutions.fileio.save_checked`)."""
    sd = {k: (v.half() if half and v.is_floating_point() else v) for k, v in model.state_dict().items()
          if k != "lm_head.weight"}
    return save_checked(path, {"config": asdict(model.config), "state_dict": sd, "meta": meta or {}})


def load_checkpoint(path: str | Path, map_location: str = "cpu", *, device: str | torch.device | None = None,
                    dtype: torch.dtype = torch.float32) -> tuple[GPT, dict]:
    """(model in eval mode, meta) from a file written by `save_checkpoint`: float32 on the CPU
    unless `device` / `dtype` say otherwise (see `solutions.device` for checked names).

    Loaded with `weights_only=True` into host memory (`map_location`), where its checksum, if
    it has one, is verified: a damaged file raises `solutions.fileio.CheckpointError` (a
    ValueError) naming it. The model is built without weights of its own (`solutions.weightless`:
    no random initialisation, nothing allocated twice) and each stored tensor goes straight
    to `device` as stored (float16: half the bytes of float32 to copy), cast there to `dtype`."""
    ckpt = load_checked(path, required=False, keys=("config", "state_dict"), what="model checkpoint",
                        map_location=map_location)
    device = torch.device(map_location if device is None else device)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    with weightless():
        model = GPT(GPTConfig(**ckpt["config"]))
    stored = ckpt["state_dict"]
    sd = {}
    for k in list(stored):
        v = stored.pop(k).to(device)  # one tensor at a time, freed on the host as it goes
        sd[k] = v.to(dtype) if v.is_floating_point() else v
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    model.load_state_dict(sd, assign=True)
    model.lm_head.weight = model.transformer.wte.weight  # tied again: assign wrapped each in its own Parameter
    return model.eval(), ckpt.get("meta", {})


def default_meta() -> dict:
    """How the default model was trained (config, seed, steps, val bits/byte)."""
    if not DEFAULT_WEIGHTS.exists():
        raise FileNotFoundError(_missing_default())
    return torch.load(DEFAULT_WEIGHTS, map_location="cpu", weights_only=True).get("meta", {})


def _missing_default() -> str:
    return (f"the course's default model {DEFAULT_WEIGHTS} is missing; "
            "train it with `python -m solutions.train --preset default`")


def load_default(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> tuple[GPT, ByteTokenizer]:
    """(model, tokenizer): the small GPT trained by `python -m solutions.train --preset default`
    on stage 02's train split of the standard-library corpus. Loaded in eval mode, float32 on
    the CPU unless `device` / `dtype` say otherwise (`load_checkpoint`)."""
    if not DEFAULT_WEIGHTS.exists():
        raise FileNotFoundError(_missing_default())
    model, _ = load_checkpoint(DEFAULT_WEIGHTS, device=device, dtype=dtype)
    return model, ByteTokenizer()


if __name__ == "__main__":  # a quick look at the default model
    m, tok = load_default()
    print(json.dumps(default_meta(), indent=1))
    print(f"{m.num_params():,} parameters")
