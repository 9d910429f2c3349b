"""Stage 02: a data pipeline that cleans a corpus and removes its duplicates.

    normalize.py    normalize_text                                              2.1
    quality.py      quality_reason; QualityConfig and its profiles              2.1
    exact.py        text_digest, ExactDeduper, exact_dedup                      2.2
    shingles.py     char_shingles, word_shingles, shingle_hashes                2.3
    minhash.py      estimate_jaccard, MinHasher.signatures; jaccard             2.4
    lsh.py          s_curve, lsh_error_areas, lsh_params, candidate_pairs,
                    verify_pairs                                                2.5
    clusters.py     UnionFind, cluster                                          2.6
    splits.py       assign_splits; source_group                                 2.7
    jsonl.py        read_jsonl, _parse_line; not_json_lines                     2.8
    pipeline.py     dedup_and_split; run_pipeline                               2.8
    byte_unicode.py bytes_to_unicode; token_to_bytes, bytes_to_token              2.9
    pretokenize.py  split_pattern; CharClasses, char_classes, pretokenize          2.10
    bpe.py          merge_ids, ByteLevelBPE.encode                                  2.11
                    ByteLevelBPE.decode                                             2.12
    bpe_train.py    learn_merges; count_pieces, train_bpe                           2.13
    corpus.py       the standard-library corpus as JSON Lines (given)
    hashing.py      span_hashes, hash_strings: the 32-bit shingle hash (given)
    config.py       PipelineConfig, SPLITS, OUTPUT_FILES (given)
    report.py       accounted, format_report (given)
    train_split.py  build_train_split, the cached train split for stage 03 (given)
    cli.py          the command line; __main__.py runs it (given)
    demo.py         `course demo` (given)
    arguments.py    the stage's argument checks (given)
    smollm2.py      SmolLM2's vocabulary from its GGUF file: gguf_tokenizer (given)

    python -m solutions.dedup --build-corpus corpus.jsonl
    python -m solutions.dedup corpus.jsonl out/ --threshold 0.85 --num-perm 128
"""

from .clusters import UnionFind, cluster
from .cli import main
from .config import OUTPUT_FILES, SPLITS, PipelineConfig
from .corpus import FIELDS, build_corpus, iter_corpus, stdlib_dir, top_level
from .demo import demo
from .exact import ExactDeduper, exact_dedup, text_digest
from .hashing import _codepoints, hash_strings, sorted_unique, span_hashes
from .jsonl import not_json_lines, read_jsonl
from .lsh import candidate_pairs, lsh_error_areas, lsh_params, s_curve, verify_pairs
from .minhash import EMPTY, MinHasher, estimate_jaccard, jaccard
from .normalize import normalize_text
from .pipeline import dedup_and_split, run_pipeline
from .quality import (PROFILE_HELP, QUALITY_PROFILES, QUALITY_REASONS, QualityConfig, profile_name,
                      quality_profile, quality_reason)
from .report import accounted, format_report
from .shingles import SHINGLE_KINDS, char_shingles, shingle_hashes, word_shingles, words_joined
from .splits import assign_splits, source_group
from .train_split import build_train_split
from .byte_unicode import byte_chars, bytes_to_token, bytes_to_unicode, token_to_bytes, unicode_to_bytes
from .pretokenize import SCHEMES, CharClasses, char_classes, pretokenize, split_pattern
from .bpe import ByteLevelBPE, merge_ids
from .bpe_train import BPETrainResult, count_pieces, learn_merges, train_bpe
from .smollm2 import gguf_tokenizer, read_gguf_tokenizer, smollm2_gguf
