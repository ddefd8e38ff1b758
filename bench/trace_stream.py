"""Trace one long-form stream decode by decode: where it searched, what its guards did, what it committed.

For finding out why a stream stalls, loops or loses a sentence. One line per decode: the source read (s), the span
of the source it decoded (the buffer's, s), why it decoded (a chunk, a full buffer, the source's end, a pause),
the end of its best hypothesis as searched (committed text included; a decode the low-confidence guard held back
shows what it held); after the last decode of each chunk pushed, the stream's counters that moved meanwhile
(``loop_stops``: a search stopped at a repetition loop; ``loop_cuts``: the loop guard cut the commit;
``unsure_skips``: the low-confidence guard held a decode back; ``no_speech_skips``; ``trims``;
``segment_commits``: a full buffer committed whole); then a line per emission, and the stream's counters at the
end::

    .venv/bin/python bench/trace_stream.py de default [--initial-wait-ms 1667] [--tail 160]

TALK and CONFIG are ``bench/longform.py``'s (the talks of ``bench/longform_sets.py``; ``default`` is the task's
``balanced`` preset). Source clock only: nothing here is timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from longform import CONFIGS, SETS, TALKS, Talk
from simulst.streaming.decoding import Decoded, DecodeReason
from simulst.streaming.session import Session


def trace(session: Session, audio: np.ndarray, tail: int = 160) -> Iterator[str]:
    """Stream ``audio`` through ``session`` a chunk at a time; yield a line per decode, the counters that moved
    during each chunk, a line per emission, and the counters at the end (see the module notes). ``tail``: the
    characters of each best hypothesis shown."""
    rate, step = session.sample_rate, session.chunk_samples
    tokenizer = session.model.tokenizer
    decoder = session.decoder
    decodes: list[tuple[DecodeReason, Decoded, int, int]] = []  # (why, as searched, source read, buffer offset)
    decode = decoder.decode

    def recorded(reason: DecodeReason, samples: int, block_loops: bool = False,
                 next_tokens: tuple[int, ...] | None = None) -> Decoded:
        offset = session.buffer.offset
        decoded = decode(reason, samples, block_loops, next_tokens)
        decodes.append((reason, decoder.last, decoded.read, offset))
        return decoded

    setattr(decoder, "decode", recorded)  # (this stream's decodes only)  # noqa: B010
    for pos in [*range(0, audio.shape[0], step), None]:  # None: the source's end
        counters = dict(session.costs.extra)
        emissions = session.push(audio[pos : pos + step]) if pos is not None else session.finish()
        moved = {k: v - counters.get(k, 0) for k, v in session.costs.extra.items() if v != counters.get(k, 0)}
        for i, (reason, searched, read, offset) in enumerate(decodes):
            best = tokenizer.decode(list(searched.hyps[0].tokens)) if searched.hyps else ""
            events = " ".join(f"+{k}" if n == 1 else f"+{n} {k}" for k, n in sorted(moved.items()))
            events = events if i == len(decodes) - 1 else ""
            yield (f"{read / rate:7.2f} s  audio {offset / rate:7.2f}-{read / rate:7.2f} s  {reason.value:<11}  "
                   f"{events:<24} …{best[-tail:]!r}")
        if not decodes and moved:  # (no decode: a trim of silence, a VAD event)
            yield f"{session.buffer.read / rate:7.2f} s  {' '.join(f'+{k}' for k in sorted(moved))}"
        decodes.clear()
        for emission in emissions:
            yield f"  EMIT {emission.source_ms / 1000:7.2f} s  {emission.text!r}"
    yield f"counters: {session.costs.extra}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("talk", choices=sorted(TALKS))
    parser.add_argument("config", choices=sorted(CONFIGS))
    parser.add_argument("--initial-wait-ms", type=float, default=None,
                        help="the first decode waits for this much audio (a chunk grid of bench/longform.py "
                             "--phases: chunk x (1 + k/3))")
    parser.add_argument("--tail", type=int, default=160, help="characters of each best hypothesis shown")
    parser.add_argument("--sets", type=Path, default=SETS, help="where bench/longform_sets.py wrote the talks")
    args = parser.parse_args()
    talk = Talk.load(args.talk, args.config, args.sets)
    options = talk.stream_options
    if args.initial_wait_ms is not None:
        options = dataclasses.replace(options, initial_wait_ms=args.initial_wait_ms)
    for audio in talk.audios:
        session = talk.engine.open(options)
        for line in trace(session, audio, args.tail):
            print(line, flush=True)


if __name__ == "__main__":
    main()
