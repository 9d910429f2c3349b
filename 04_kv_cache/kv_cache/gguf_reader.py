# GENERATED from solutions/kv_cache/gguf_reader.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 04_kv_cache/04_kv_cache.ipynb. Exercises in this file (line of each hole, then the commands):
#   4.11 A GGUF reader: header, metadata, tensor infos, alignment: lines 25, 47; `course check 4.11`, `course hint 4.11`
"""Exercise 4.11: a GGUF reader — header, metadata, tensor infos, alignment, memory-mapped data."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def read_value(buf: np.ndarray, pos: int, vtype: int) -> tuple[Any, int]:
    """One metadata value of GGUF value type `vtype` (VALUE_TYPES) whose bytes start at `pos`
    of `buf` (the file's bytes, uint8): (value, the position just past it).

    All little-endian. Scalars as `SCALAR_FORMATS` gives them (BOOL -> bool, integers -> int,
    FLOAT32/FLOAT64 -> float); STRING: a uint64 byte length, then that many bytes of UTF-8,
    returned as str; ARRAY: a uint32 item type, a uint64 count, then the items one after
    another (strings, or arrays of arrays, included), returned as a list.
    Raises ValueError naming `vtype` for a type GGUF does not define."""
    raise NotImplementedError('Exercise 4.11: A GGUF reader: header, metadata, tensor infos, alignment — see 04_kv_cache.ipynb')


def read_gguf(path: str | Path) -> GGUFFile:
    """The GGUF file at `path`, memory-mapped (nothing of the tensor data is copied).

    Layout (little-endian): magic b"GGUF", version uint32 (2 or 3), tensor count uint64,
    metadata count uint64; the metadata, each a key (a GGUF string), a uint32 value type and
    the value (`read_value`); the tensor infos, each a name (a string), n_dims uint32, n_dims
    uint64 dims INNERMOST FIRST, a uint32 ggml type and a uint64 offset relative to the data
    section. The data section starts at the end of the tensor infos rounded up to the
    alignment, `general.alignment` if the metadata has it, else 32.

    Returns a GGUFFile: `metadata` in file order; `tensors` by name in file order, each with
    `shape` in numpy (row-major) order, that is the dims reversed, its ggml type, its absolute
    `offset` in the file and `data`, a 1-D uint8 view of its bytes (`tensor_nbytes`).
    Raises FileNotFoundError for a missing file and ValueError naming the file for one that
    is not GGUF (wrong magic), of an unsupported version, truncated, or whose tensor data lies
    outside the file."""
    path = Path(path)
    buf = _map(path)
    try:
        raise NotImplementedError('Exercise 4.11: A GGUF reader: header, metadata, tensor infos, alignment — see 04_kv_cache.ipynb')
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is truncated or corrupted: {e}") from None
    return GGUFFile(path, version, metadata, tensors, alignment, start)


# ---- given: the format's tables and the result types --------------------------------------

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# GGUF value types (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
SCALAR_FORMATS = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
                  FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
VALUE_TYPES = {**{t: f for t, f in SCALAR_FORMATS.items()}, STRING: "string", ARRAY: "array"}

# ggml tensor types this course reads: id -> (name, weights a block, bytes a block)
F32, F16, Q4_0, Q4_1, Q8_0 = 0, 1, 2, 3, 8
GGML_TYPES = {F32: ("F32", 1, 4), F16: ("F16", 1, 2), Q4_0: ("Q4_0", 32, 18), Q4_1: ("Q4_1", 32, 20),
              Q8_0: ("Q8_0", 32, 34)}


def tensor_nbytes(ggml_type: int, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of `shape` (numpy order) stored as `ggml_type`: its rows are whole
    blocks (the innermost dim a multiple of the block size). ValueError for a type this
    course does not read or a row that is not whole blocks."""
    if ggml_type not in GGML_TYPES:
        raise ValueError(f"ggml_type must be one of {sorted(GGML_TYPES)} "
                         f"({', '.join(n for n, _, _ in GGML_TYPES.values())}), got {ggml_type}")
    name, block, size = GGML_TYPES[ggml_type]
    n = int(np.prod(shape, dtype=np.int64))
    if shape and shape[-1] % block:
        raise ValueError(f"a {name} tensor's rows must be whole blocks of {block}, got shape {tuple(shape)}")
    return n // block * size


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file: `shape` in numpy order, `data` its bytes (uint8, 1-D, a view
    of the memory-mapped file), `offset` where they start in the file."""
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    data: np.ndarray = field(repr=False)

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]


@dataclass(frozen=True)
class GGUFFile:
    """A read GGUF file: the metadata (key -> value) and the tensors (name -> GGUFTensor), in
    file order; `alignment` and `data_offset`, where the data section starts."""
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]
    alignment: int
    data_offset: int


def _map(path: Path) -> np.ndarray:
    """The file's bytes, memory-mapped read-only (given)."""
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    if path.stat().st_size < 24:
        raise ValueError(f"{path} is not a GGUF file: {path.stat().st_size} bytes, shorter than the header")
    return np.memmap(path, dtype=np.uint8, mode="r")
