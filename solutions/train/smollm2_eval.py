"""Stage 03's evaluation on a decoder with a BPE tokenizer (given): SmolLM2-135M-Instruct as
`course eval smollm2` runs it, and any model of its family (stage 04's quantised copies).

    model, tok = load_smollm2()                          # solutions.kv_cache (stage 04)
    r = evaluate_decoder(model, tok, examples=50, max_bytes=16384, threads=1)
    r["bits_per_byte"]["code"], r["line_exact"], r["task_acc"]   # decoder_report(r, name): course eval's

Three measures, each on data built reproducibly on this machine:
- bits per byte on stage 02's held-out splits, per source, as stage 03's table (`source_row`:
  the mean over documents of each document's bits / bytes, with its 95 % interval), the first
  `DOC_BYTES` bytes of each document counted in UTF-8 and its tokens from the model's own BPE;
- line completion on the held-out lines of `load_eval_sets` (`complete_lines_bpe`, greedy,
  the prefix as BPE tokens; exact match, the course's edit similarity and CodeXGLUE's);
- one task: `stdlib_task`'s multiple-choice questions, each choice scored by its summed
  log-likelihood after the prompt, as lm-eval scores a `multiple_choice` task (acc, acc_norm).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import stdlib_task
from .bpe_completion import complete_lines_bpe
from .eval_report import EvalReport, Margin
from .eval_sets import SOURCES, load_eval_sets
from .evaluation import LN2
from .line_completion import codexglue_edit_sim, edit_similarity, exact_match
from .llama import Llama
from .perplexity import DOC_BYTES, DocScore, source_row

EOT_TEXT = "<|endoftext|>"  # the document separator SmolLM2 was trained with: the context of a document's first token
LINE_BLOCK = 256  # complete_lines_bpe's block_size: the last 128 tokens of a prefix (as for stage 03's Llama)
MAX_BYTES = 16384  # `course eval smollm2`'s cap on the bytes scored per source (None: every document)
N_LINES = 50  # `course eval smollm2`'s line-completion examples (the first 50 of the 150: load_eval_sets)
SHUFFLE_SEED = 0  # the order in which documents are taken under a cap
BATCH = 8  # rows per forward (scoring is exact per row: padding is only ever to a row's right)
#: what the gate adds for a report with the task: acc may fall by 0.05 (3 of 64 questions pass, 4 fail)
TASK_MARGINS: dict[str, Margin] = {"task_acc": Margin(True, 0.05)}


def evaluate_decoder(model: nn.Module, tokenizer, *, examples: int = N_LINES,
                     task_questions: int | None = None, max_bytes: int | None = None,
                     threads: int | None = None, data: str | None = None,
                     progress: Callable[[str], None] | None = None) -> dict:
    """Bits per byte, line completion and the task accuracy of one decoder.

    Args:
        model: a course decoder mapping (B, T) int64 ids to (B, T, V) logits (stage 03's
            `Llama`, `load_smollm2`'s model, one with quantised linear layers); its context is
            `config.max_seq_len` (or `config.block_size`).
        tokenizer: the model's `ByteLevelBPE` (stage 02's), with EOT_TEXT among its special tokens.
        examples: line-completion examples, the first `examples` of `load_eval_sets` (>= 1).
        task_questions: the first this many of `stdlib_task.documents()` (None: all 64).
        max_bytes: the cap on the bytes scored per source (None: every held-out document);
            documents are taken in a fixed shuffled order (seed SHUFFLE_SEED) while their scored
            bytes (the first DOC_BYTES of each) sum to at most the cap (one at least).
        threads: torch's threads during the call (restored after); None: unchanged.
        data: stage 02's corpus folder (None: data/corpus), as `course eval --data`.

    Returns a dict:
        bits_per_byte: {source: float}, the mean over the source's documents of each
            document's bits / bytes (bits: the summed NLL of its tokens, each predicted from
            the tokens before it after one EOT_TEXT token, plus a final EOT_TEXT when the whole
            document was scored; bytes: the UTF-8 bytes scored);
        line_exact, line_edit_sim: percent (0..100), exact match and 1 - Levenshtein/max over
            the examples; line_codexglue_edit_sim: CodeXGLUE's fuzz.ratio, 0..100;
        task_acc, task_acc_norm: fractions in [0, 1] (acc_norm divides a choice's log-likelihood by
            its length in characters, as lm-eval does); task_n: the questions; and the details
            rows, line_samples, task_samples, construction, seconds (`decoder_report`).
    The model's mode and weights are left as they were; the result is deterministic.
    ValueError: examples < 1, task_questions < 1, max_bytes < 1, threads < 1.
    """
    _check_args(examples=examples, task_questions=task_questions, max_bytes=max_bytes, threads=threads)
    say = progress or (lambda _m: None)
    before, was = torch.get_num_threads(), model.training
    if threads is not None:
        torch.set_num_threads(threads)
    model.eval()
    seconds: dict[str, float] = {}
    try:
        sets = load_eval_sets(data, n_examples=examples)
        t0 = time.perf_counter()
        rows, picked = {}, {}
        for kind in SOURCES:
            docs = capped_documents([d for d in sets.documents if d.source == kind], max_bytes)
            if docs:
                say(f"{kind}: scoring {len(docs)} documents")
                picked[kind] = [d.doc_id for d in docs]
                rows[kind] = source_row(score_texts(model, tokenizer, [d.text for d in docs]))
        seconds["bits_per_byte"], t0 = time.perf_counter() - t0, time.perf_counter()
        say(f"completing {len(sets.completions)} lines")
        preds = complete_lines_bpe(model, tokenizer, [e.prefix for e in sets.completions], block_size=LINE_BLOCK)
        lines = [_line_sample(e, p) for e, p in zip(sets.completions, preds)]
        seconds["line_completion"], t0 = time.perf_counter() - t0, time.perf_counter()
        questions = stdlib_task.documents()[:task_questions]
        say(f"task {stdlib_task.TASK}: scoring {len(questions)} questions")
        task = [score_question(model, tokenizer, q) for q in questions]
        seconds["task"] = time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)
        model.train(was)
    n = len(lines)
    construction = {"sets": sets.fingerprint, "doc_bytes": DOC_BYTES, "max_bytes_per_source": max_bytes,
                    "shuffle_seed": SHUFFLE_SEED, "documents": picked, "line_examples": n,
                    "line_block": LINE_BLOCK, "task": stdlib_task.TASK, "task_questions": len(task),
                    "task_md5": hashlib.md5(json.dumps(questions).encode()).hexdigest()}
    return {"bits_per_byte": {k: r["bpb"] for k, r in rows.items()},
            "line_exact": 100.0 * sum(s["exact"] for s in lines) / n,
            "line_edit_sim": 100.0 * sum(s["similarity"] for s in lines) / n,
            "line_codexglue_edit_sim": sum(s["codexglue_similarity"] for s in lines) / n,
            "task_acc": sum(t["correct"] for t in task) / max(len(task), 1),
            "task_acc_norm": sum(t["correct_norm"] for t in task) / max(len(task), 1),
            "task_n": len(task), "rows": rows, "line_samples": lines, "task_samples": task,
            "construction": construction, "seconds": {k: round(v, 2) for k, v in seconds.items()}}


def capped_documents(docs: Sequence, max_bytes: int | None) -> list:
    """`docs` (in the sets' order) if max_bytes is None, else the first of them, in the order
    random.Random(SHUFFLE_SEED).shuffle gives, whose scored bytes (min(len(UTF-8), DOC_BYTES)
    each) sum to at most max_bytes; the first document always."""
    if max_bytes is None:
        return list(docs)
    order = list(docs)
    random.Random(SHUFFLE_SEED).shuffle(order)
    out: list = []
    total = 0
    for d in order:
        b = min(len(d.text.encode("utf-8")), DOC_BYTES)
        if out and total + b > max_bytes:
            break
        out.append(d)
        total += b
    return out


def eot_id(tokenizer) -> int:
    """The id of EOT_TEXT in the tokenizer; ValueError if it has none."""
    special = getattr(tokenizer, "special_ids", {})
    if EOT_TEXT not in special:
        raise ValueError(f"the tokenizer has no {EOT_TEXT} special token (it has {sorted(special)})")
    return special[EOT_TEXT]


def document_ids(tokenizer, text: str, max_bytes: int = DOC_BYTES) -> tuple[list[int], int]:
    """(ids, bytes): [EOT] + the tokens of the text's first `max_bytes` UTF-8 bytes (a character
    cut by the limit dropped) + [EOT] when the whole text fits; bytes = the UTF-8 bytes kept."""
    data, eot = text.encode("utf-8"), eot_id(tokenizer)
    kept = data[:max_bytes].decode("utf-8", errors="ignore")
    nbytes = len(kept.encode("utf-8"))
    return [eot, *tokenizer.encode(kept)] + ([eot] if nbytes == len(data) else []), nbytes


def context_length(model: nn.Module) -> int:
    cfg = getattr(model, "config", None)
    n = getattr(cfg, "max_seq_len", None) or getattr(cfg, "block_size", None)
    if not n:
        raise ValueError("the model has no config.max_seq_len or config.block_size: its context is unknown")
    return int(n)


@torch.no_grad()
def sequence_nats(model: nn.Module, seqs: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """For each sequence s, the NLL in nats of s[1:] (each target from the ids before it), a
    float64 tensor of len(s) - 1 values. Sequences longer than the model's context are scored in
    consecutive windows of `context` targets (each window predicts from itself only), as
    stage 03's `score_document`. Rows are batched BATCH at a time, padded on the right."""
    ctx = context_length(model)
    pieces: list[tuple[int, list[int]]] = []  # (sequence index, window of ids)
    for i, s in enumerate(seqs):
        if len(s) < 2:
            raise ValueError(f"sequence {i} has {len(s)} ids: nothing to predict")
        for start in range(0, len(s) - 1, ctx):
            pieces.append((i, list(s[start:start + ctx + 1])))
    order = sorted(range(len(pieces)), key=lambda j: len(pieces[j][1]))  # similar lengths together
    results: dict[int, torch.Tensor] = {}
    for b in range(0, len(order), BATCH):
        batch = [pieces[j][1] for j in order[b:b + BATCH]]
        T = max(len(w) for w in batch) - 1
        x, y = torch.zeros(len(batch), T, dtype=torch.int64), torch.full((len(batch), T), -100, dtype=torch.int64)
        for r, w in enumerate(batch):
            x[r, :len(w) - 1] = torch.tensor(w[:-1])
            y[r, :len(w) - 1] = torch.tensor(w[1:])
        logits = model(x).float()
        nll = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none", ignore_index=-100).view_as(y)
        for r, j in enumerate(order[b:b + BATCH]):
            results[j] = nll[r, :len(pieces[j][1]) - 1].double()
    return [torch.cat([results[j] for j, (i, _) in enumerate(pieces) if i == k]) for k in range(len(seqs))]


def score_texts(model: nn.Module, tokenizer, texts: Sequence[str], *, max_bytes: int = DOC_BYTES) -> list[DocScore]:
    """One DocScore per text (`document_ids`, `sequence_nats`): nats summed over the targets,
    tokens = the targets (EOT included), bytes = the UTF-8 bytes scored."""
    docs = [document_ids(tokenizer, t, max_bytes) for t in texts]
    nats = sequence_nats(model, [ids for ids, _ in docs])
    return [DocScore(nats=float(n.sum()), bits=float(n.sum()) / LN2, tokens=len(n), bytes=max(b, 1))
            for n, (_, b) in zip(nats, docs)]


def choice_tokens(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's split of a request (`TemplateLM._encode_pair`, causal): trailing spaces of the
    context move to the continuation; the context's ids are encode(context), the
    continuation's are encode(context + continuation) past that many ids."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole = tokenizer.encode(context + continuation)
    ctx = tokenizer.encode(context)
    return ctx, whole[len(ctx):]


def score_question(model: nn.Module, tokenizer, doc: dict) -> dict:
    """One multiple-choice question scored as lm-eval scores `output_type: multiple_choice`:
    each choice c's log-likelihood ll(c) = the summed log-probabilities of its continuation ids
    (`choice_tokens(context(doc), TARGET_DELIMITER + c)`) after the context ids; correct:
    argmax ll == answer; correct_norm: argmax ll / len(c) (characters) == answer (lm-eval's
    acc_norm); ties go to the first choice (numpy's argmax)."""
    context = stdlib_task.context(doc)
    pairs = [choice_tokens(tokenizer, context, stdlib_task.TARGET_DELIMITER + c) for c in doc["choices"]]
    if isinstance(model, Llama) and all(ctx == pairs[0][0] for ctx, _ in pairs):
        lls = choice_loglikelihoods(model, pairs[0][0], [cont for _, cont in pairs])
    else:  # any other decoder: each choice a row of its own
        nats = sequence_nats(model, [ctx + cont for ctx, cont in pairs])
        lls = [-float(n[len(ctx) - 1:].sum()) for n, (ctx, _) in zip(nats, pairs)]
    norm = [ll / len(c) for ll, c in zip(lls, doc["choices"])]
    pred, pred_norm = _argmax(lls), _argmax(norm)
    return {"question": doc["question"], "answer": doc["answer"], "loglikelihoods": lls,
            "pred": pred, "pred_norm": pred_norm, "correct": pred == doc["answer"],
            "correct_norm": pred_norm == doc["answer"]}


@torch.no_grad()
def choice_loglikelihoods(model: Llama, ctx: Sequence[int], conts: Sequence[Sequence[int]]) -> list[float]:
    """The summed log-probability of each continuation after `ctx`, computed in ONE row: ctx,
    then every continuation, each at the positions it would have right after ctx (len(ctx),
    len(ctx) + 1, ...) and attending to ctx and to itself only (a tree of continuations sharing
    their prefix). Equal, up to float rounding, to scoring ctx + cont as a row of its own for each
    cont; the shared prefix is computed once, and the head only where a continuation is predicted."""
    L, sizes = len(ctx), [len(c) for c in conts]
    if L < 1 or min(sizes, default=0) < 1:
        raise ValueError("the context and every continuation need at least one token")
    ids = list(ctx) + [t for c in conts for t in c]
    T = len(ids)
    seg = torch.tensor([0] * L + [j + 1 for j, n in enumerate(sizes) for _ in range(n)])
    positions = torch.cat([torch.arange(L)] + [torch.arange(L, L + n) for n in sizes])
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = causal & ((seg[None, :] == 0) | (seg[None, :] == seg[:, None]))  # keys: ctx, or the same continuation
    x = model.embed(torch.tensor([ids]))
    for block in model.blocks:
        x = block(x, positions[None], mask=mask[None, None], is_causal=False)
    out, start = [], L
    for c in conts:
        rows = [L - 1] + list(range(start, start + len(c) - 1))  # where each of c's tokens is predicted
        lp = torch.log_softmax(model.head(x[0, rows]).double(), -1)
        out.append(float(lp[torch.arange(len(c)), torch.tensor(c)].sum()))
        start += len(c)
    return out


def decoder_report(result: dict, name: str) -> EvalReport:
    """`evaluate_decoder`'s result as an `EvalReport` (what `course eval --json` saves and
    `--against` gates): its rows, completion and task; the sets' fingerprint covers the sets,
    the cap, the documents taken, the examples and the task's questions, so that only reports
    made on the same data compare."""
    c = result["construction"]
    fingerprint = hashlib.sha256(json.dumps(c, sort_keys=True).encode()).hexdigest()[:16]
    completion = {"examples": len(result["line_samples"]), "exact_match": result["line_exact"],
                  "edit_similarity": result["line_edit_sim"],
                  "codexglue_edit_sim": result["line_codexglue_edit_sim"]}
    task = {"name": stdlib_task.TASK, "n": result["task_n"], "acc": result["task_acc"],
            "acc_norm": result["task_acc_norm"], "seconds": result["seconds"]}
    return EvalReport(model=name, rows=result["rows"], completion=completion, samples=result["line_samples"],
                      sets={"fingerprint": fingerprint, "construction": c}, task=task,
                      seconds=round(sum(result["seconds"].values()), 2))


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))


def _line_sample(e, p: str) -> dict:
    pred, want = p.strip(), e.target.strip()
    return {"doc_id": e.doc_id, "line_no": e.line_no, "target": want, "prediction": pred,
            "exact": exact_match(pred, want), "similarity": edit_similarity(pred, want),
            "codexglue_similarity": codexglue_edit_sim(pred, want)}


def _check_args(**values) -> None:
    for name, v in values.items():
        if (v is not None or name == "examples") and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name} must be an int >= 1{'' if name == 'examples' else ' or None'}, got {v!r}")
