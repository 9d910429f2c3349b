"""One training run's settings (given): `TrainConfig`, and the presets of the command line."""

from __future__ import annotations

from dataclasses import dataclass, field

from solutions.checks import check_ints
from solutions.gpt import GPTConfig

from .arguments import check_positive
from .llama import LlamaConfig


@dataclass
class TrainConfig:
    """One training run. The global batch is batch_size x grad_accum x processes windows."""

    model: GPTConfig | LlamaConfig = field(default_factory=GPTConfig)  # which decoder `train` builds
    batch_size: int = 16  # windows per micro-batch, per process
    block_size: int = 256  # window length (at most model.block_size)
    grad_accum: int = 1  # micro-batches per optimizer step, per process
    steps: int = 1000
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 50
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    max_norm: float = 1.0
    eval_every: int = 100  # 0: evaluate only after the last step
    eval_tokens: int = 65536  # val targets per evaluation
    eval_batch_size: int = 32  # windows per evaluation forward (no gradients kept: larger is cheap)
    ckpt_every: int = 0  # 0: save the training state only at the end (if a path is given)
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):  # read back from a checkpoint or JSON
            self.model = (LlamaConfig if "n_kv_heads" in self.model else GPTConfig)(**self.model)
        self.betas = tuple(self.betas)
        check_ints(1, batch_size=self.batch_size, block_size=self.block_size, grad_accum=self.grad_accum,
                   steps=self.steps, eval_tokens=self.eval_tokens, eval_batch_size=self.eval_batch_size)
        check_positive(max_lr=self.max_lr, max_norm=self.max_norm)
        if self.block_size > self.model.block_size:
            raise ValueError(f"block_size {self.block_size} exceeds the model's context {self.model.block_size}")
        if not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"warmup_steps must be in [0, steps={self.steps}], got {self.warmup_steps}")
        if self.eval_every < 0 or self.ckpt_every < 0:
            raise ValueError(f"eval_every and ckpt_every must be >= 0, got {self.eval_every}, {self.ckpt_every}")


PRESETS: dict[str, TrainConfig] = {
    # a smoke run for tests, the notebook and torchrun: seconds on a laptop
    "tiny": TrainConfig(model=GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=32), batch_size=8,
                        block_size=32, steps=40, max_lr=1e-2, min_lr=1e-3, warmup_steps=5,
                        eval_every=20, eval_tokens=4096),
    # the course's default model: 2 layers x 192 dims (0.99 M parameters; stages 04-08 run it
    # many times, so the work per token stays small), 6,000 steps of 4 windows of 256: 6.1 M
    # tokens, a quarter of the train split; the time and bits/byte of the committed run are in
    # stage 03's README and the checkpoint's meta. Chosen by pilot runs (same code, data and
    # seed, fp32 on a GPU; val bits/byte on these 65,536 tokens). Tokens matter most: 2 x 192
    # gave 2.23 after 2.6 M tokens, 1.94 / 1.84 / 1.73 after 4.1 / 5.1 / 6.1 M, 1.42 after 16 M.
    # At 16 M tokens deeper or wider did better (3 x 192 1.36, 4 x 192 1.34, 3 x 256 1.32,
    # 4 x 256 1.30, 6 x 128 1.37), but a fixed CPU budget buys ~1.5x more tokens of 2 x 192
    # than of 3 x 192, and 3 x 192 after 3.1 / 3.6 M tokens gave only 2.12 / 2.02. Batch 8 was
    # no better than 4 for the same tokens; peak learning rate 3e-3 worse than 2e-3 (1.88 vs
    # 1.84 after 5.1 M), 1e-3 about the same at 16 M.
    "default": TrainConfig(model=GPTConfig(n_layer=2, n_head=6, n_embd=192), batch_size=4, block_size=256,
                           steps=6000, max_lr=2e-3, min_lr=2e-4, warmup_steps=300, eval_every=1000,
                           eval_tokens=65536),
    # the course's Llama on BPE tokens (run by `python -m solutions.train.llama_default`, on a
    # wall-clock budget: `steps` is the schedule's resolution, the position in it the fraction of
    # the budget spent). The pilot table in stage 03's README (150 s a shape) favours these KV
    # heads, depth and width; the vocabulary of 2,048 led 4,096 at 150 s, at 600 s and at the
    # final run's whole 1,860 s, side by side (README 03, "The vocabulary at the full budget").
    "llama": TrainConfig(model=LlamaConfig(vocab_size=2048, dim=192, n_layers=2, n_heads=6, n_kv_heads=2,
                                           hidden_dim=512, max_seq_len=256),
                         batch_size=4, block_size=256, steps=10000, max_lr=2e-3, min_lr=2e-4, warmup_steps=500,
                         eval_every=0, eval_tokens=65536),
}
