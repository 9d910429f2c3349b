"""The pipeline's settings and output names (given code)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .arguments import check_depth, check_fractions, check_threshold, check_weights, positive_int
from .minhash import MinHasher
from .quality import QualityConfig

SPLITS = ("train", "val", "test")
# what run_pipeline writes into its output folder; the report last (it marks a complete set)
OUTPUT_FILES = (*(f"{name}.jsonl" for name in SPLITS), "removed.jsonl", "report.json")


@dataclass(frozen=True)
class PipelineConfig:
    """Every knob of `run_pipeline` (the CLI flags map onto these)."""

    threshold: float = 0.85
    num_perm: int = 128
    seed: int = 1
    shingle: str = "word"
    n: int = 5
    verify: str = "exact"  # "exact": Jaccard of the shingle sets; "estimate": from signatures
    # LSH weights of the (false-positive, false-negative) areas. Every candidate is verified,
    # so a false positive costs one Jaccard computation while a false negative leaves a
    # duplicate in the data: weigh misses 9 times more (0.85, 128 -> 11 bands x 11 rows).
    lsh_weights: tuple[float, float] = (0.1, 0.9)
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    group_depth: int = 2
    batch_size: int = 512  # documents per MinHash batch while streaming
    quality: QualityConfig = field(default_factory=QualityConfig)

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        if self.verify not in ("exact", "estimate"):
            raise ValueError(f"verify must be 'exact' or 'estimate', got {self.verify!r}")
        positive_int("batch_size", self.batch_size)
        MinHasher(self.num_perm, self.seed, shingle=self.shingle, n=self.n)  # validates those
        check_fractions(self.fractions)
        check_weights(self.lsh_weights)
        check_depth(self.group_depth)
        if not isinstance(self.quality, QualityConfig):
            raise TypeError(f"quality must be a QualityConfig, got {type(self.quality).__name__}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["fractions"] = list(self.fractions)
        d["lsh_weights"] = list(self.lsh_weights)
        return d
