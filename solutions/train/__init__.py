"""Stage 03: the training loop — optimisers, schedules, clipping, checkpoints, data parallel.

Part 1 on the stage-01 NumPy engine, Part 2 in PyTorch on the course's GPT. The files, in
exercise order:

    optim.py        SGD with momentum, AdamW                           3.1, 3.2
    schedule.py     lr_schedule: linear warmup, cosine decay            3.3
    clip.py         clip_grad_norm: clipping by global norm             3.4
    mlp_lm.py       sample_contexts, MLPLanguageModel (+ a torch twin)  3.5
    engine_loop.py  evaluate_mlp_lm, train_mlp_lm                       3.6
    data.py         get_batch (+ load_tokens)                           3.7
    guard.py        NonFiniteLossError, check_finite                    3.8
    step.py         train_step with gradient accumulation               3.8
    evaluation.py   evaluate: loss and bits per byte                    3.9
    checkpoint.py   save_training_state, load_training_state            3.10
    distributed.py  setup_distributed, shard_batch, all_reduce_mean     3.11
    perplexity.py   score_document, mean_interval (+ source_row)        3.12
    line_completion.py  edit_similarity, exact_match, select_examples   3.13
                    (+ candidate_lines, complete_lines: greedy)
    eval_report.py  compare: the regression gate                        3.14
                    (+ MARGINS, evaluate_model, EvalReport, gate, ContextWindowModel)
    rmsnorm.py      RMSNorm                                             3.15
    rope.py         apply_rope: rotary positions, per row               3.16
    swiglu.py       SwiGLU: the gated MLP                               3.17
    gqa.py          grouped_query_attention                             3.18
  given:
    arguments.py    check_positive          config.py   TrainConfig, PRESETS
    loop.py         make_optimizer, train   sampling.py pick_next, generate, sample_gpt, ...
    plot.py         plot_history            cli.py      main: python -m solutions.train
    demo.py         demo                    omp_env.py, __main__.py: the command line's start
    eval_sets.py    EvalSets, build_eval_sets, load_eval_sets: the held-out sets
    eval_cli.py     run_eval: `course eval MODEL [--against BASELINE]`
    llama.py        LlamaConfig, Llama (+ random_llama): 3.15-3.18 composed, Hugging Face's keys
    bpe_data.py     the course BPE vocabulary (assets/course_bpe.json), BPE streams, evaluate_bpe
    llama_default.py  the Llama on BPE tokens on a wall-clock budget; save_llama, load_llama

    python -m solutions.train --preset tiny         # writes out/tiny/gpt.pt (a run folder)
    torchrun --standalone --nproc_per_node 2 -m solutions.train --preset tiny --data DIR
"""

from __future__ import annotations

from dataclasses import asdict, replace  # the old module's names: `train.asdict`

from . import omp_env  # first: the command line's setting, before torch loads
from .optim import SGD, AdamW
from .schedule import lr_schedule
from .clip import clip_grad_norm
from .mlp_lm import MLPLanguageModel, TorchMLPLanguageModel, sample_contexts
from .engine_loop import evaluate_mlp_lm, train_mlp_lm
from .data import get_batch, load_tokens
from .guard import NonFiniteLossError, check_finite
from .step import grad_sync, lm_loss, train_step
from .evaluation import LN2, evaluate
from .checkpoint import TRAINING_STATE_KEYS, load_training_state, save_training_state, unwrap
from .distributed import all_reduce_mean, setup_distributed, shard_batch
from .perplexity import DOC_BYTES, DocScore, Interval, mean_interval, score_document, source_row
from .line_completion import (LEAK_CONTEXT, PREFIX_CHARS, CompletionExample, candidate_lines, complete_lines,
                              edit_similarity, exact_match, select_examples)
from .eval_report import MARGINS, ContextWindowModel, EvalReport, Margin, compare, evaluate_model, gate
from .rmsnorm import RMSNorm
from .rope import apply_rope
from .swiglu import SwiGLU
from .gqa import grouped_query_attention
from .llama import Llama, LlamaAttention, LlamaBlock, LlamaConfig, random_llama
from .eval_sets import Document, EvalSets, build_eval_sets, load_eval_sets, read_split, source_kind
from .config import PRESETS, TrainConfig
from .loop import HISTORY_KEYS, make_optimizer, train
from .sampling import generate, pick_next, sample_gpt, sample_mlp_lm
from .plot import plot_history
from .cli import CORPUS_DIR, REPO, RUNS_DIR, corpus_splits, describe_split, main
from .demo import demo
from .eval_cli import run_eval
