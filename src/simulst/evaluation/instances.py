"""SimulEval's ``instances.log``: one JSON object per line, one line per evaluated instance.

SimulEval (>= 1.1) writes, for a speech-to-text instance::

    {"index": 0, "prediction": "And so my ...", "delays": [1000.0, 1000.0, 2000.0, ...],
     "elapsed": [1034.2, 1034.2, 2101.7, ...], "prediction_length": 23, "reference": "...",
     "source": [...], "source_length": 11000.0}

* ``delays[i]``: ms of source read when output unit i (a word, a character or a SentencePiece piece,
  see ``--eval-latency-unit``) was written (computation-unaware time);
* ``elapsed[i]``: the same plus the wall-clock time the instance had spent since its first source segment
  (computation-aware time; SimulEval >= 1.1.4 restarts the clock for every instance);
* ``source_length``: |X| in ms; ``reference``: the reference text, ``null`` when there is none.

:class:`InstanceRecord` is one such line. Keys other than the eight above are kept verbatim in ``extra`` so that
a log can be read and written back without loss; simulst stores its own per-instance data (emissions, costs,
the utterance id) under the single key ``"simulst"``. SimulEval's ``--score-only`` reads every key of a line
into an attribute of its ``LogInstance``, so the extra key must not shadow one of that class's properties
(``reference_length``): a single ``simulst`` key keeps clear of all of them.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulst.errors import SimulstError

LOG_NAME = "instances.log"
SIMULST_KEY = "simulst"
_CORE_KEYS = (
    "index",
    "prediction",
    "delays",
    "elapsed",
    "prediction_length",
    "reference",
    "source",
    "source_length",
)

logger = logging.getLogger(__name__)


class LogFormatError(SimulstError):
    """An ``instances.log`` (or a line of it) is missing, unreadable or not in SimulEval's format."""


@dataclass
class InstanceRecord:
    """One line of ``instances.log``.

    Attributes:
        index: the instance's position in the test set (0-based).
        prediction: the output text as SimulEval writes it (word unit: words joined by one space; char unit:
            the characters without spaces; spm unit: the detokenised pieces).
        delays: per output unit, ms of source read when it was written (computation-unaware).
        elapsed: per output unit, ``delays`` plus the compute time spent on this instance so far
            (computation-aware); empty when the run was computation-unaware.
        prediction_length: number of output units (``len(delays)``).
        reference: the reference text, or None when the test set has none.
        source: the source as the writer described it (simulst: the audio path; SimulEval: soundfile's info
            lines).
        source_length: |X|, the source duration in ms.
        extra: any other keys of the line, kept verbatim (simulst's own data lives under ``"simulst"``).
        reference_missing: True when the line had no ``reference`` key at all (SimulEval then uses ``""``,
            whose word length is 1, rather than falling back to the prediction length as it does for
            ``null``; we mirror that).
    """

    index: int
    prediction: str
    delays: list[float]
    elapsed: list[float] = field(default_factory=list)
    prediction_length: int | None = None
    reference: str | None = None
    source: Any = None
    source_length: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    reference_missing: bool = False

    def __post_init__(self) -> None:
        if self.prediction_length is None:
            self.prediction_length = len(self.delays)

    @property
    def is_empty(self) -> bool:
        """True when the instance produced no output unit (SimulEval skips it in latency averages)."""
        return len(self.delays) == 0

    @property
    def simulst(self) -> dict[str, Any]:
        """simulst's own per-instance data (empty for a log written by SimulEval)."""
        value = self.extra.get(SIMULST_KEY)
        return value if isinstance(value, dict) else {}

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this line, SimulEval's keys first, in SimulEval's order."""
        out: dict[str, Any] = {
            "index": self.index,
            "prediction": self.prediction,
            "delays": list(self.delays),
            "elapsed": list(self.elapsed),
            "prediction_length": self.prediction_length,
        }
        if not self.reference_missing:
            out["reference"] = self.reference
        out["source"] = self.source
        out["source_length"] = self.source_length
        out.update(self.extra)
        return out

    def to_json(self) -> str:
        """One line of ``instances.log`` (no trailing newline)."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, info: dict[str, Any]) -> InstanceRecord:
        """Build a record from a parsed log line; raises :class:`LogFormatError` on a malformed one."""
        if not isinstance(info, dict):
            raise LogFormatError(f"a log line must be a JSON object, got {type(info).__name__}")
        for key in ("index", "delays", "source_length"):
            if key not in info:
                raise LogFormatError(f"log line lacks the {key!r} key")
        try:
            index = int(info["index"])
            delays = [float(d) for d in info["delays"] or []]
            elapsed = [float(e) for e in info.get("elapsed") or []]
            source_length = float(info["source_length"])
        except (TypeError, ValueError) as exc:
            raise LogFormatError(f"log line {info.get('index')!r}: bad number ({exc})") from exc
        if not math.isfinite(source_length) or source_length <= 0:
            raise LogFormatError(f"instance {index}: source_length must be > 0 ms, got {source_length}")
        if elapsed and len(elapsed) != len(delays):
            raise LogFormatError(
                f"instance {index}: {len(elapsed)} elapsed times for {len(delays)} delays "
                "(they must be equally long, or elapsed empty)"
            )
        reference = info.get("reference")
        if reference is not None and not isinstance(reference, str):
            raise LogFormatError(f"instance {index}: reference must be a string or null")
        prediction = info.get("prediction", "")
        if not isinstance(prediction, str):
            # speech output logs hold a wav path here; we only score text output
            prediction = str(prediction)
        prediction_length = info.get("prediction_length")
        extra = {k: v for k, v in info.items() if k not in _CORE_KEYS}
        return cls(
            index=index,
            prediction=prediction,
            delays=delays,
            elapsed=elapsed,
            prediction_length=int(prediction_length) if isinstance(prediction_length, int | float) else None,
            reference=reference,
            source=info.get("source"),
            source_length=source_length,
            extra=extra,
            reference_missing="reference" not in info,
        )

    @classmethod
    def from_json(cls, line: str) -> InstanceRecord:
        """Parse one log line."""
        try:
            info = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LogFormatError(f"not a JSON line: {exc}") from exc
        return cls.from_dict(info)


def log_path(log_dir_or_file: str | Path) -> Path:
    """The ``instances.log`` of an output folder (or the file itself when a file is given)."""
    path = Path(log_dir_or_file)
    return path / LOG_NAME if path.is_dir() else path


def iter_log(path: str | Path, *, drop_truncated_tail: bool = False) -> Iterator[InstanceRecord]:
    """Yield the records of a log file in file order.

    Args:
        path: an ``instances.log`` file or a folder holding one.
        drop_truncated_tail: when True, a malformed *last* line (a run killed while writing it) is skipped
            with a warning instead of raising.
    """
    file = log_path(path)
    if not file.is_file():
        raise LogFormatError(f"no instances.log at {file}")
    lines = file.read_text(encoding="utf-8").splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    for pos, (n, line) in enumerate(numbered):
        try:
            yield InstanceRecord.from_json(line)
        except LogFormatError as exc:
            if drop_truncated_tail and pos == len(numbered) - 1:
                logger.warning("%s:%d: ignoring a truncated last line (%s)", file, n, exc)
                return
            raise LogFormatError(f"{file}:{n}: {exc}") from exc


def read_log(path: str | Path, *, drop_truncated_tail: bool = False) -> list[InstanceRecord]:
    """All records of a log, sorted by index; raises :class:`LogFormatError` on duplicates."""
    records = list(iter_log(path, drop_truncated_tail=drop_truncated_tail))
    seen: set[int] = set()
    for rec in records:
        if rec.index in seen:
            raise LogFormatError(f"{log_path(path)}: instance {rec.index} appears twice")
        seen.add(rec.index)
    if not records:
        raise LogFormatError(f"{log_path(path)} holds no instances")
    return sorted(records, key=lambda r: r.index)


def write_log(path: str | Path, records: Iterable[InstanceRecord]) -> None:
    """Write (overwrite) a whole log file."""
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(rec.to_json() + "\n")


def append_record(path: str | Path, record: InstanceRecord) -> None:
    """Append one record and flush it to disk, so an interrupted run can resume after it."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(record.to_json() + "\n")
        f.flush()


def repair_log(path: str | Path) -> list[InstanceRecord]:
    """Read a log left by an interrupted run, rewriting it without a truncated last line if it has one.

    Returns the records kept (file order). A missing file gives an empty list.
    """
    file = Path(path)
    if not file.exists():
        return []
    text = file.read_text(encoding="utf-8")
    records = list(iter_log(file, drop_truncated_tail=True))
    if len(records) != sum(1 for line in text.splitlines() if line.strip()) or (text and not text.endswith("\n")):
        write_log(file, records)
    return records
