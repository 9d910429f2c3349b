# GENERATED from solutions/server/choices.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""An answer's choices as OpenAI shapes them (given code): text, `echo`, log-probabilities.

/v1/completions, `logprobs: k` (and `echo`): each choice's `logprobs` is
    {"tokens": [str], "token_logprobs": [float | None], "top_logprobs": [{str: float} | None],
     "text_offset": [int]}
one entry per token (with echo the prompt's first, its first token's logprob and top null),
`top_logprobs` the k most likely tokens at that position plus the token chosen (vLLM's, so
up to k + 1 entries; OpenAI's "may be up to logprobs+1"), `text_offset` where each token's
string starts in the choice's text (in a stream: counted from the choice's first chunk).
/v1/chat/completions, `logprobs: true, top_logprobs: k`: `{"content": [{"token", "logprob",
"bytes", "top_logprobs": [{"token", "logprob", "bytes"}] (k of them)}]}`.
A token's string is its bytes decoded (a token ending inside a UTF-8 character shows U+FFFD;
its `bytes` are the true ones), a special token's its own text ("<|im_end|>"). Log-
probabilities are the model's raw distribution (solutions/batching/logprobs.py).
"""

from __future__ import annotations

from .engine_client import Delta, Finish, Logprobs
from .served_model import ServedTokenizer
from .state import Job
from .streaming import sse


def chunk(job: Job, choices: list[dict], usage: dict | None = None) -> dict:
    """One streamed chunk (a completion's "text_completion", a chat's "chat.completion.chunk")."""
    obj = "text_completion" if job.gen.kind == "completion" else "chat.completion.chunk"
    out = {"id": job.id, "object": obj, "created": job.created, "model": job.gen.model, "choices": choices}
    if usage is not None:
        out["usage"] = usage
    return out


class Choices:
    """One job's choices as its events come: texts and log-probability entries, as the
    non-streamed answer (`add` each event, then `answer`) or as SSE frames (`frames` of
    each batch of events; a chat choice's first frame carries the assistant role, an echoed
    completion's first frame its prompt)."""

    def __init__(self, job: Job, tokenizer: ServedTokenizer):
        self.job, self.g, self.tok = job, job.gen, tokenizer
        n = self.g.num_choices
        self.texts = [""] * n
        self.entries: list[list] = [[] for _ in range(n)]   # each choice's sampled tokens' entries
        self.prompt_entries: dict[int, tuple] = {}           # echo: the prompt's, until sent
        self.offsets = [0] * n                               # a stream's text_offset so far
        self.opened: set[int] = set()
        self._tokens: dict[int, tuple[str, bytes]] = {}

    # -- the non-streamed answer
    def add(self, ev: Delta | Logprobs) -> None:
        if isinstance(ev, Logprobs):
            if ev.prompt:
                self.prompt_entries[ev.index] = ev.entries
            else:
                self.entries[ev.index].extend(ev.entries)
        else:
            self.texts[ev.index] += ev.text

    def answer(self, finished: dict[int, Finish]) -> list[dict]:
        out = []
        for i in range(self.g.num_choices):
            if self.g.kind == "completion":
                text = (self._prompt_text(i) if self.g.echo else "") + self.texts[i]
                entries = [*self._prompt(i), *self.entries[i]]
                out.append({"index": i, "text": text, "logprobs": self._logprobs(i, entries),
                            "finish_reason": finished[i].reason})
            else:
                out.append({"index": i, "message": {"role": "assistant", "content": self.texts[i]},
                            "logprobs": self._logprobs(i, self.entries[i]), "finish_reason": finished[i].reason})
        return out

    # -- the stream
    def frames(self, events: list) -> list[bytes]:
        """The SSE frames of a batch of Delta, Logprobs and Finish events: a Delta carries
        the entries that came before it in the batch; entries left without text go out as a
        frame of empty text at the end of the batch (or before their choice's finish)."""
        frames: list[bytes] = []
        pending: dict[int, list] = {}
        for ev in events:
            i = ev.index
            if isinstance(ev, Logprobs):
                if ev.prompt:
                    self.prompt_entries[i] = ev.entries
                else:
                    pending.setdefault(i, []).extend(ev.entries)
                continue
            frames += self._open(i)
            if isinstance(ev, Delta):
                frames.append(self._frame(i, ev.text, None, pending.pop(i, None)))
            else:
                if pending.get(i):
                    frames.append(self._frame(i, "", None, pending.pop(i)))
                frames.append(self._frame(i, None, ev.reason, None))
        for i in sorted(set(pending) | set(self.prompt_entries)):
            frames += self._open(i)
            if pending.get(i):
                frames.append(self._frame(i, "", None, pending[i]))
        return frames

    def _open(self, i: int) -> list[bytes]:
        if i in self.opened:
            return []
        self.opened.add(i)
        if self.g.kind == "chat":
            return [sse(chunk(self.job, [{"index": i, "delta": {"role": "assistant", "content": ""},
                                          "logprobs": None, "finish_reason": None}]))]
        if self.g.echo:
            return [self._frame(i, self._prompt_text(i), None, self._prompt(i))]
        return []

    def _frame(self, i: int, text: str | None, finish: str | None, entries: list | None) -> bytes:
        logprobs = self._logprobs(i, entries or [], stream=True) if entries else None
        if self.g.kind == "completion":
            choice = {"index": i, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": i, "delta": {"content": text} if text else {}, "logprobs": logprobs,
                      "finish_reason": finish}
        return sse(chunk(self.job, [choice]))

    # -- the shapes
    def _prompt_text(self, i: int) -> str:
        return self.tok.decode(list(self.g.batch[i // self.g.n]))

    def _prompt(self, i: int) -> list:
        """Choice i's prompt entries as (id, logprob, top) (the first: None, None), once."""
        entries = self.prompt_entries.pop(i, None)
        if entries is None:
            return []
        prompt = self.g.batch[i // self.g.n]
        return [(prompt[0], None, None), *entries[1:]]

    def _token(self, tid: int) -> tuple[str, bytes]:
        if tid not in self._tokens:
            table = self.tok.text.token_bytes
            data = table[tid] if 0 <= tid < len(table) else b""
            s = data.decode("utf-8", errors="replace") if data else self.tok.token_strs([tid])[0]
            self._tokens[tid] = (s, data or s.encode())
        return self._tokens[tid]

    def _logprobs(self, i: int, entries: list, stream: bool = False) -> dict | None:
        k = self.g.logprobs
        if k is None:
            return None
        if self.g.kind == "chat":
            content = []
            for tid, lp, top in entries:
                s, b = self._token(tid)
                content.append({"token": s, "logprob": lp, "bytes": list(b), "top_logprobs": [
                    {"token": self._token(j)[0], "logprob": v, "bytes": list(self._token(j)[1])} for j, v in top[:k]]})
            return {"content": content}
        tokens: list[str] = []
        lps: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        offsets: list[int] = []
        offset = self.offsets[i] if stream else 0
        for tid, lp, top in entries:
            s = self._token(tid)[0]
            tokens.append(s)
            lps.append(lp)
            offsets.append(offset)
            offset += len(s)
            if lp is None:
                tops.append(None)
                continue
            d: dict[str, float] = {}
            for j, v in top[:k]:
                d.setdefault(self._token(j)[0], v)
            d.setdefault(s, lp)
            tops.append(d)
        if stream:
            self.offsets[i] = offset
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}
