"""Token ids -> text (given code): whole UTF-8 characters, stop strings held back and cut."""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from solutions.tokenizer import EOT, VOCAB_SIZE


@dataclass(frozen=True, eq=False)
class TokenText:
    """What the engine needs of the served model's tokenizer to turn ids into text:
    `token_bytes[i]`, the bytes token i adds to the text (b"" for a special token: not
    shown, as vLLM's default `skip_special_tokens`), and `eos_id`, the id that ends a
    sequence (finish_reason "stop"). Sent to the engine once, when it starts."""

    token_bytes: tuple[bytes, ...]
    eos_id: int


#: The course's byte-level model: ids 0..255 are the bytes, 256 end-of-text (no text).
BYTE_TEXT = TokenText(tuple(bytes([b]) for b in range(256)) + (b"",) * (VOCAB_SIZE - 256), EOT)


class Detokenizer:
    """Token ids of one sequence -> text deltas (given code).

    Each token adds its bytes (`text.token_bytes`; the byte model's by default; an id
    outside the table adds nothing), decoded incrementally: a character's bytes may arrive
    over several tokens (a BPE token may end inside a character), and nothing is emitted
    before the character is whole; bytes that are no valid UTF-8 become U+FFFD where
    `bytes.decode(errors="replace")` of the whole sequence puts them. So the deltas and
    `flush`, joined, are the decoded bytes of every token, whatever the split. Stop strings: text that could
    still be the start of a stop string is held back; when one appears, the text before
    it is the last delta and the sequence stops (the stop string itself is not returned,
    as in OpenAI's API). A stop string that ends before `stop_after` characters of text
    (`hold_stops`: the text of a sequence's first `min_tokens` tokens, as vLLM counts them)
    does not count.
    """

    def __init__(self, stop: tuple[str, ...] = (), text: TokenText = BYTE_TEXT):
        self.stop = tuple(stop)
        self._bytes = text.token_bytes
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._blind = 0  # characters at the start of `_pending` a stop string may not end in

    def push(self, token: int, *, hold_stops: bool = False) -> tuple[str, bool]:
        """Add a token; return (text to emit now, whether a stop string ended the sequence).
        `hold_stops`: this token is among the first `min_tokens`, so no stop string may end
        in the text so far (one that starts in it and ends later still counts)."""
        data = self._bytes[token] if 0 <= token < len(self._bytes) else b""
        if not data:
            return "", False
        self._pending += self._decoder.decode(data)
        if hold_stops:
            self._blind = len(self._pending)
        if self.stop:
            hits = [i for i in (self._pending.find(s, max(0, self._blind - len(s) + 1)) for s in self.stop) if i >= 0]
            if hits:
                out, self._pending = self._pending[:min(hits)], ""
                return out, True
            keep = min(self._hold, len(self._pending))
            cut = len(self._pending) - keep
            out, self._pending = self._pending[:cut], self._pending[cut:]
            self._blind = max(0, self._blind - cut)
            return out, False
        out, self._pending = self._pending, ""
        return out, False

    def flush(self) -> str:
        """The held-back text at the end of the sequence."""
        out, self._pending = self._pending + self._decoder.decode(b"", final=True), ""
        self._blind = 0
        return out
