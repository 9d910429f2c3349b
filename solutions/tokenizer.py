"""The course's tokenizer: byte-level, shared by every model from stage 03 on (given code).

Text is encoded as its UTF-8 bytes, so ids 0..255 are bytes and the vocabulary needs no
training and can represent any string; one extra id, `EOT` = 256, marks the end of a
document. A byte-level model spends more positions per word than a BPE model does, which
is the price of a tokenizer with nothing to learn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

EOT = 256
VOCAB_SIZE = 257


class ByteTokenizer:
    """UTF-8 bytes as token ids, plus an end-of-text id.

    >>> tok = ByteTokenizer()
    >>> tok.encode("hé")
    [104, 195, 169]
    >>> tok.decode([104, 195, 169, 256])
    'hé'
    """

    vocab_size = VOCAB_SIZE
    eot_id = EOT

    def encode(self, text: str, eot: bool = False) -> list[int]:
        """The UTF-8 bytes of `text` (and `EOT` at the end if `eot`)."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        ids = list(text.encode("utf-8"))
        if eot:
            ids.append(EOT)
        return ids

    def encode_batch(self, texts: Iterable[str], eot: bool = False) -> list[list[int]]:
        return [self.encode(t, eot) for t in texts]

    def decode(self, ids: Sequence[int], stop_at_eot: bool = False) -> str:
        """Bytes back to text; `EOT` ids are dropped (or end the text if `stop_at_eot`).

        A model can emit a byte sequence that is not valid UTF-8 (half a character), so
        undecodable bytes become U+FFFD instead of raising.
        """
        out = bytearray()
        for i in ids:
            i = int(i)
            if i == EOT:
                if stop_at_eot:
                    break
                continue
            if not 0 <= i < 256:
                raise ValueError(f"token id {i} is outside the byte vocabulary 0..{EOT}")
            out.append(i)
        return out.decode("utf-8", errors="replace")
