"""A SimulEval agent that runs a simulst Session, so SimulEval can evaluate simulst directly::

    simuleval --agent-class simulst.cli.simuleval_agent.SimulstAgent \\
        --source src.txt --target tgt.txt --source-segment-size 1000 \\
        --model ../shared/models/whisper-tiny.en --policy la-2 --chunk-ms 1000 --output out/

Importing this module needs ``simuleval`` (not a dependency of simulst: ``pip install --no-deps simuleval``).

SimulEval's loop (``SentenceLevelEvaluator``): per instance, ``reset()``; then for every source segment of
``--source-segment-size`` ms, ``push(segment)`` followed by one ``policy()`` call, until the segment marked
``finished`` has been pushed. The agent pushes each segment's samples into its Session (which decodes at every
``--chunk-ms`` boundary it crosses) and answers the policy call with one ``WriteAction`` holding whatever the
Session emitted, or a ``ReadAction``; on the last segment it calls ``Session.finish()`` and writes the rest
with ``finished=True``. Segment size and chunk size are independent, but a segment size equal to the chunk size
(or dividing it) gives the same delays as ``simulst eval``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import soxr
from simuleval.agents import SpeechToTextAgent
from simuleval.agents.actions import Action, ReadAction, WriteAction
from simuleval.data.segments import Segment, SpeechSegment

from simulst.cli.options import add_stream_arguments, model_from_args, stream_options_from_args
from simulst.config import StreamOptions
from simulst.models.base import SpeechModel
from simulst.streaming.session import Session


class SimulstAgent(SpeechToTextAgent):
    """Speech-to-text SimulEval agent around a :class:`~simulst.streaming.session.Session` (one per instance)."""

    def __init__(self, args: argparse.Namespace | None = None, model: SpeechModel | None = None,
                 options: StreamOptions | None = None) -> None:
        if model is None or options is None:
            if args is None:
                raise ValueError("SimulstAgent needs parsed arguments, or a model and stream options")
            options = options or stream_options_from_args(args)
            model = model or model_from_args(args, task=args.task)
        self.model: SpeechModel = model
        self.stream_options: StreamOptions = options
        self.session: Session = Session(model, options)
        self._text = ""  # emitted by the Session, not yet written
        self._resampler: Any = None
        self._resampler_rate = 0
        super().__init__(args)  # builds the states and calls reset()

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        """simulst's stream options (``--model --policy --chunk-ms --search --beam ...``) and ``--task``."""
        add_stream_arguments(parser)
        parser.add_argument("--task", choices=("transcribe", "translate"), default="transcribe",
                            help="Whisper task (translate: into English)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SimulstAgent:
        """Build the agent (and load the model) from SimulEval's parsed arguments."""
        return cls(args)

    def reset(self) -> None:
        """A new instance: a fresh Session (the model is shared and stays loaded)."""
        super().reset()
        self.session = Session(self.model, self.stream_options)
        self._text = ""
        self._resampler = None

    def _to_model_rate(self, samples: np.ndarray, rate: int, last: bool) -> np.ndarray:
        target = self.model.sample_rate
        if rate <= 0 or rate == target:
            return samples
        if self._resampler is None or self._resampler_rate != rate:
            self._resampler = soxr.ResampleStream(rate, target, 1, dtype="float32")
            self._resampler_rate = rate
        out: np.ndarray = self._resampler.resample_chunk(samples, last=last)
        return out

    def push(self, source_segment: Segment, states: Any = None, upstream_states: Any = None) -> None:
        """Update SimulEval's states, then feed the new samples to the Session (decoding any chunk reached)."""
        super().push(source_segment, states, upstream_states)
        if self.session.state.finished:
            return
        emissions = []
        if isinstance(source_segment, SpeechSegment) and len(source_segment.content) > 0:
            samples = np.asarray(source_segment.content, dtype=np.float32)
            samples = self._to_model_rate(samples, int(source_segment.sample_rate), source_segment.finished)
            emissions += self.session.push(samples)
        if source_segment.finished:
            emissions += self.session.finish()
        self._text += "".join(e.text for e in emissions)

    def policy(self) -> Action:
        """Write what the Session emitted since the last call (all of it, finished, at the source end)."""
        text, self._text = self._text, ""
        if self.states.source_finished:
            return WriteAction(text, finished=True)
        if text.strip():
            return WriteAction(text, finished=False)
        return ReadAction()
