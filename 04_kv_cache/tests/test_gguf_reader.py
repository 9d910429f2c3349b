"""4.11: the GGUF reader against the `gguf` package (llama.cpp's gguf-py), on files that package
wrote (every metadata value type, tensors of several types and shapes, alignments 32 and 64)
and on SmolLM2's real file (what the wheel is documented to hold)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

import course

kc = course.load("kv_cache")
pytestmark = pytest.mark.exercise("4.11")
Q, V = gguf.GGMLQuantizationType, gguf.GGUFValueType

EXTRA = {"test.u8": (200, V.UINT8), "test.i8": (-100, V.INT8), "test.u16": (60000, V.UINT16),
         "test.i16": (-30000, V.INT16), "test.u32": (4_000_000_000, V.UINT32), "test.i32": (-2_000_000_000, V.INT32),
         "test.f32": (0.1, V.FLOAT32), "test.bool": (True, V.BOOL), "test.false": (False, V.BOOL),
         "test.str": ("héllo, 日本 😀", V.STRING), "test.empty": ("", V.STRING),
         "test.u64": (2 ** 63 + 5, V.UINT64), "test.i64": (-(2 ** 62), V.INT64), "test.f64": (1e-300, V.FLOAT64),
         "test.ints": ([3, -1, 4, 1, -5], V.ARRAY), "test.strs": (["a", "", "ü b", "<|im_end|>"], V.ARRAY),
         "test.floats": ([0.5, -2.25, 1e10], V.ARRAY), "test.bools": ([True, False, True], V.ARRAY),
         "test.nested": ([[1, 2], [3]], V.ARRAY)}
TYPES = {"token_embd": Q.Q8_0, "attn_q": Q.Q4_1, "attn_k": Q.Q4_1, "ffn_down": Q.F16, "ffn_up": Q.Q8_0}


@pytest.fixture(scope="module")
def files(tmp_path_factory, write_llama_gguf):
    d = tmp_path_factory.mktemp("gguf")
    return {"every type": write_llama_gguf(d / "a.gguf", types=TYPES, extra=EXTRA),
            "aligned 64": write_llama_gguf(d / "b.gguf", types=TYPES, alignment=64, seed=1,
                                           extra={"x.pad": ("odd" * 7, V.STRING)}),
            "unaligned header": write_llama_gguf(d / "c.gguf", n_layer=1, seed=2,
                                                 extra={"x.pad": ("abcde", V.STRING)})}


def oracle_value(field):
    return field.contents()


def test_metadata_of_every_value_type_equals_gguf(files):
    f, r = kc.read_gguf(files["every type"]), gguf.GGUFReader(files["every type"])
    want = {k: oracle_value(v) for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert list(f.metadata) == list(want), "metadata must hold every key, in file order"
    for key, value in want.items():
        if key == "test.nested":
            continue  # gguf's contents() flattens an array of arrays; checked by hand below
        got = f.metadata[key]
        assert got == value and type(got) is type(value), \
            f"{key}: got {got!r} ({type(got).__name__}), gguf reads {value!r} ({type(value).__name__})"
    assert f.metadata["test.f32"] == float(np.float32(0.1))  # a float32, widened exactly
    assert f.metadata["test.nested"] == [[1, 2], [3]] and f.metadata["test.bools"] == [True, False, True]
    assert f.version == 3


@pytest.mark.parametrize("which", ["every type", "aligned 64", "unaligned header"])
def test_tensors_equal_gguf_shape_type_offset_and_bytes(files, which):
    f, r = kc.read_gguf(files[which]), gguf.GGUFReader(files[which])
    assert f.alignment == r.alignment and f.data_offset == r.data_offset, (
        f"the data section starts at {f.data_offset}, gguf says {r.data_offset}: it begins at the end of the tensor "
        f"infos rounded UP to general.alignment ({r.alignment}; 32 when the key is absent)")
    assert list(f.tensors) == [t.name for t in r.tensors], "tensors must be keyed by name, in file order"
    for t in r.tensors:
        ours = f.tensors[t.name]
        numpy_shape = tuple(int(d) for d in reversed(t.shape))
        assert ours.shape == numpy_shape, (f"{t.name}: shape {ours.shape}, want {numpy_shape}: GGUF lists dims "
                                           "innermost first, numpy's shape is those dims reversed")
        assert ours.ggml_type == int(t.tensor_type), f"{t.name}: type {ours.ggml_type}, gguf {t.tensor_type!r}"
        assert ours.offset == t.data_offset, (f"{t.name}: data at byte {ours.offset}, gguf {t.data_offset}: the "
                                              "offset counts from the ALIGNED start of the data section")
        want = np.asarray(t.data).reshape(-1).view(np.uint8)
        assert ours.data.dtype == np.uint8 and ours.data.ndim == 1 and ours.data.size == want.size
        assert np.array_equal(ours.data, want), f"{t.name}: its bytes differ from gguf's"


def test_the_alignment_matters_in_these_files(files):
    """The files above are built so that ignoring the alignment moves the data: their tensor
    infos do not end on a multiple of it."""
    for which in ("aligned 64", "unaligned header"):
        r = gguf.GGUFReader(files[which])
        last = r.tensors[-1].field
        infos_end, a = int(last.offset) + sum(int(p.nbytes) for p in last.parts), int(r.alignment)
        assert infos_end % a and int(r.data_offset) == infos_end + (-infos_end) % a, (which, infos_end, a)
        assert kc.read_gguf(files[which]).data_offset == int(r.data_offset), (
            f"{which}: the tensor infos end at {infos_end}; the data starts there rounded UP to the alignment {a}")


def test_data_is_a_view_of_the_file_not_a_copy(files):
    f = kc.read_gguf(files["every type"])
    t = f.tensors["token_embd.weight"]
    assert not t.data.flags.owndata and not t.data.flags.writeable, "data must be a read-only view of the mapped file"


def test_smollm2_file(smollm2_file):
    f = kc.read_gguf(smollm2_file)
    m = f.metadata
    assert (m["general.architecture"], m["llama.block_count"], m["llama.embedding_length"]) == ("llama", 30, 576)
    assert (m["llama.attention.head_count"], m["llama.attention.head_count_kv"], m["llama.feed_forward_length"]) == (9, 3, 1536)
    assert m["llama.rope.freq_base"] == 100000.0 and m["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))
    assert len(m["tokenizer.ggml.tokens"]) == 49152 and len(m["tokenizer.ggml.merges"]) == 48900
    assert m["tokenizer.ggml.tokens"][2] == "<|im_end|>" and m["tokenizer.ggml.pre"] == "smollm"
    assert m["tokenizer.chat_template"].startswith("{% for message in messages %}")
    assert len(f.tensors) == 272 and "output.weight" not in f.tensors  # tied embeddings
    types = [t.ggml_type for t in f.tensors.values()]
    assert (types.count(8), types.count(3), types.count(0)) == (1, 210, 61)  # Q8_0, Q4_1, F32
    assert f.tensors["token_embd.weight"].shape == (49152, 576)
    assert f.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)
    assert f.tensors["blk.0.attn_k.weight"].shape == (192, 576)
    assert f.tensors["token_embd.weight"].offset == f.data_offset == 1785664


def test_bad_files_are_refused_naming_the_file(tmp_path, files):
    with pytest.raises(FileNotFoundError):
        kc.read_gguf(tmp_path / "absent.gguf")
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"PK\x03\x04" + bytes(60))
    with pytest.raises(ValueError, match="not a GGUF"):
        kc.read_gguf(bad)
    old = tmp_path / "v1.gguf"
    old.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(40))
    with pytest.raises(ValueError, match="version 1"):
        kc.read_gguf(old)
    data = files["every type"].read_bytes()
    for cut in (30, len(data) // 2, len(data) - 3):
        short = tmp_path / f"cut{cut}.gguf"
        short.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=str(short.name)):
            kc.read_gguf(short)
