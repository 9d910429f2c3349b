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
    # BEGIN SOLUTION 4.11
    # DECISION: how far each value moves the position (a scalar its struct size, a string 8
    #   bytes of length plus its bytes, an array 4 + 8 bytes plus each item, recursively), and
    #   where a tensor's bytes start: the data section begins at the end of the tensor infos
    #   rounded UP to the alignment, each offset counting from there, dims innermost first.
    # HINT: struct.unpack_from(fmt, buf, pos) reads a scalar at pos without a copy;
    #   struct.calcsize(fmt) is how far it moved.
    # HINT: A string is `<Q` (its length n) then n bytes: bytes(buf[pos:pos + n]).decode("utf-8").
    # HINT: An array reads its item type (`<I`) and count (`<Q`), then calls read_value once
    #   per item with the item type, threading the position through. (A large array of one
    #   scalar type can also be read at once with np.frombuffer and .tolist().)
    if vtype in SCALAR_FORMATS:
        fmt = SCALAR_FORMATS[vtype]
        (value,) = struct.unpack_from(fmt, buf, pos)
        return (bool(value) if vtype == BOOL else value), pos + struct.calcsize(fmt)
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return bytes(buf[pos + 8:pos + 8 + n]).decode("utf-8"), pos + 8 + n
    if vtype == ARRAY:
        item, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if item in SCALAR_FORMATS and item != BOOL:  # one read for a block of numbers
            dtype = np.dtype(SCALAR_FORMATS[item])
            return np.frombuffer(buf, dtype, count, pos).tolist(), pos + count * dtype.itemsize
        values = []
        for _ in range(count):
            value, pos = read_value(buf, pos, item)
            values.append(value)
        return values, pos
    raise ValueError(f"vtype must be a GGUF value type (0..12), got {vtype}")
    # END SOLUTION


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
        # BEGIN SOLUTION 4.11
        # HINT: Read the header with one struct.unpack_from("<4sIQQ", buf, 0), then the
        #   metadata with read_value (a key is a value of type STRING, then a uint32 type),
        #   keeping the position as you go.
        # HINT: A tensor info is a name, n_dims, the dims, the type, the offset. GGUF lists
        #   dims innermost (fastest-varying) first: numpy's shape is tuple(reversed(dims)).
        # HINT: After the last info, start = pos rounded up to a multiple of the alignment
        #   (metadata "general.alignment", default 32): -(-pos // a) * a. A tensor's bytes
        #   are buf[start + offset : start + offset + tensor_nbytes(type, shape)].
        magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
        if magic != MAGIC:
            raise ValueError(f"{path} is not a GGUF file: it starts with {magic!r}, not {MAGIC!r}")
        if version not in (2, 3):
            raise ValueError(f"{path} is GGUF version {version}; this reader reads versions 2 and 3")
        pos, metadata = 24, {}
        for _ in range(n_kv):
            key, pos = read_value(buf, pos, STRING)
            (vtype,), pos = struct.unpack_from("<I", buf, pos), pos + 4
            metadata[key], pos = read_value(buf, pos, vtype)
        infos = []
        for _ in range(n_tensors):
            name, pos = read_value(buf, pos, STRING)
            (n_dims,) = struct.unpack_from("<I", buf, pos)
            dims = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
            ggml_type, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * n_dims)
            pos += 4 + 8 * n_dims + 12
            infos.append((name, tuple(int(d) for d in reversed(dims)), ggml_type, offset))
        alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        start = -(-pos // alignment) * alignment
        tensors = {}
        for name, shape, ggml_type, offset in infos:
            at, n = start + offset, tensor_nbytes(ggml_type, shape)
            if at + n > len(buf):
                raise ValueError(f"{path}: the data of tensor {name} (bytes {at}..{at + n}) lies outside the "
                                 f"file ({len(buf)} bytes); the file is truncated or corrupted")
            tensors[name] = GGUFTensor(name, shape, ggml_type, at, buf[at:at + n])
        # END SOLUTION
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
