"""bench/trace_stream.py: a line per decode and per emission of a toy stream, worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.streaming.session import Session
from tests.toy import ToySpeechModel, UnsureToy, tone
from trace_stream import trace


def options(chunk_ms: float) -> StreamOptions:
    return StreamOptions(chunk_ms=chunk_ms, policy=PolicyOptions.parse("la-2"), search=SearchOptions("greedy"))


def test_a_line_per_decode_and_per_emission() -> None:
    # the LA-2 schedule of test_session's toy (word i heard at (i+1)*700 ms, " uh" guessed next); the source ends at
    # 4.2 s: its last decode commits the rest whole
    lines = list(trace(Session(ToySpeechModel(), options(1000)), tone(4200), tail=12))
    blank = " " * 24
    assert lines == [
        f"   1.00 s  audio    0.00-   1.00 s  chunk        {blank} …' the uh'",
        f"   2.00 s  audio    0.00-   2.00 s  chunk        {blank} …' the cat uh'",
        "  EMIT    2.00 s  'the'",
        f"   3.00 s  audio    0.00-   3.00 s  chunk        {blank} …'at sat on uh'",  # (the last 12 characters)
        "  EMIT    3.00 s  ' cat'",
        f"   4.00 s  audio    0.00-   4.00 s  chunk        {blank} …'at on the uh'",
        "  EMIT    4.00 s  ' sat on'",
        f"   4.20 s  audio    0.00-   4.20 s  source end   {blank} …'t on the mat'",
        "  EMIT    4.20 s  ' the mat'",
        "counters: {}",
    ]


def test_a_decode_line_names_the_counters_that_moved() -> None:
    # 0.5 s: nothing heard; the search stops at the 4th " uh" (a loop) and the guard holds the babble back (the
    # line shows what it held)
    lines = list(trace(Session(UnsureToy(), options(500)), tone(1500)))
    assert lines[0] == "   0.50 s  audio    0.00-   0.50 s  chunk        +loop_stops +unsure_skips …' uh uh uh uh'"
    assert lines[1] == f"   1.00 s  audio    0.00-   1.00 s  chunk        {' ' * 24} …' the uh'"
    assert lines[-1] == "counters: {'loop_stops': 1, 'unsure_skips': 1}"
