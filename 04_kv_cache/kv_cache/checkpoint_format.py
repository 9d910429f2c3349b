# GENERATED from solutions/kv_cache/checkpoint_format.py by `course stubs --write`.
# Nothing to write here: given code of stage 04 (04_kv_cache/04_kv_cache.ipynb).
"""Given: the default model as safetensors beside torch.save's pickle (nothing to write here).

`torch.save` writes a zip of pickled Python objects plus the tensors' bytes; `torch.load`
unpickles it (with `weights_only=True`, only tensors and plain containers are allowed).
safetensors (Hugging Face, https://huggingface.co/docs/safetensors) is a JSON header (names,
dtypes, shapes, byte offsets) followed by the raw bytes: nothing to execute, and a loader
can map the file and create each tensor from its bytes. `04_kv_cache/bench.py --load`
measures what each costs on this machine (peak memory and time, in fresh processes).

    save_safetensors(model, path)        atomic; config and a SHA-256 of the tensors in the header
    load_safetensors(path) -> GPT        verified: keys, shapes, dtypes, checksum
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from solutions.fileio import CheckpointError, atomic_write, check_outputs, content_digest
from solutions.gpt import GPT, GPTConfig

TIED = "lm_head.weight"  # the head's weight IS the token embedding: stored once


def save_safetensors(model: GPT, path: str | Path, half: bool = False) -> Path:
    """Write `model`'s weights (the tied head once; fp16 if `half`) and its config to `path`
    as safetensors, atomically (a killed run leaves the old file; `check_outputs` refuses a
    folder, an unwritable place or a file the course ships first). The header's metadata holds
    "config" (JSON) and "sha256" (`solutions.fileio.content_digest` of the tensors in key
    order), which `load_safetensors` verifies."""
    from safetensors.torch import save

    if not isinstance(model, GPT):
        raise TypeError(f"model must be a solutions.gpt.GPT, got {type(model).__name__}")
    sd = {k: (v.half() if half and v.is_floating_point() else v).detach().contiguous()
          for k, v in model.state_dict().items() if k != TIED}
    sd = dict(sorted(sd.items()))
    meta = {"config": json.dumps(asdict(model.config)), "sha256": content_digest(sd)}
    path = Path(path)
    check_outputs(files=[path], what="checkpoint")  # never a shipped file, a folder, or unwritable
    with atomic_write(path, "wb") as f:
        f.write(save(sd, metadata=meta))
    return path


def read_safetensors(path: str | Path, verify: bool = True) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a safetensors file; with `verify`, its stored SHA-256 is checked.
    A missing file is FileNotFoundError; an empty, truncated, corrupted or foreign one a
    `CheckpointError` (a ValueError) naming the file."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no safetensors checkpoint at {path}")
    size = path.stat().st_size
    try:
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
        sd = load_file(path)
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"the safetensors checkpoint {path} ({size:,} bytes) is corrupted or truncated "
                              f"and cannot be read ({e}); delete it or restore a good copy") from None
    if verify:
        if "sha256" not in meta:
            raise CheckpointError(f"the safetensors checkpoint {path} carries no sha256 in its metadata; "
                                  "it was not written by save_safetensors, so it cannot be verified")
        if content_digest(dict(sorted(sd.items()))) != meta["sha256"]:
            raise CheckpointError(f"the safetensors checkpoint {path} is corrupted: its tensors do not match "
                                  "the checksum stored in it; delete it or restore a good copy")
    return sd, meta


def load_safetensors(path: str | Path, verify: bool = True) -> GPT:
    """The GPT saved by `save_safetensors`, float32, in eval mode. Checked before use: the
    config parses, and the tensors are exactly the model's (no key missing or extra, every
    shape as the config says, floating where the model is); else `CheckpointError`."""
    sd, meta = read_safetensors(path, verify)
    try:
        model = GPT(GPTConfig(**json.loads(meta["config"])))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"the safetensors checkpoint {path} has no usable config in its metadata ({e})") from None
    want = {k: v for k, v in model.state_dict().items() if k != TIED}
    missing, extra = sorted(set(want) - set(sd)), sorted(set(sd) - set(want))
    if missing or extra:
        raise CheckpointError(f"the safetensors checkpoint {path} does not hold this model's weights: "
                              f"missing {missing[:5]}, unexpected {extra[:5]}")
    for k, v in want.items():
        if tuple(sd[k].shape) != tuple(v.shape) or sd[k].is_floating_point() != v.is_floating_point():
            raise CheckpointError(f"the safetensors checkpoint {path}: {k} is {tuple(sd[k].shape)} {sd[k].dtype}, "
                                  f"the model needs {tuple(v.shape)} {v.dtype}")
    sd = {k: v.float() if v.is_floating_point() else v for k, v in sd.items()}
    sd[TIED] = sd["transformer.wte.weight"]
    model.load_state_dict(sd)
    return model.eval()
