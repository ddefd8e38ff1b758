"""AlignAtt's attention test (Papi, Negri, Turchi, *AlignAtt: Using Attention-based Audio-Translation Alignments as
a Guide for Simultaneous Speech Translation*, Interspeech 2023), a stop rule of the search.

While a chunk is decoded, before each new token the decoder position that predicts it is asked where it attends:
the cross-attention of the model's alignment heads (summed; Whisper checkpoints list them as
``alignment_heads``) over the encoder frames. When the most attended frame lies within the last F frames of the
audio read - or beyond it, in the window's padding - the token depends on audio that may still change, and the
search of this chunk stops before it. The tokens before the stop are the chunk's hypothesis; the policy
(:class:`~simulst.policies.alignatt.AlignAtt`) commits them, cut back to a whole word. F is the latency knob
(SimulStreaming's ``frame_threshold``; 25 frames = 0.5 s for Whisper). The rule is never asked on the final chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from simulst.errors import OptionError
from simulst.models.base import AlignedDecoder, DecoderModel, Encoded
from simulst.search.stopping import StopCheck, StopRule
from simulst.types import Costs

DEFAULT_FRAMES = 25  # F: 0.5 s of Whisper encoder frames (20 ms each), SimulStreaming's default


class AlignAttRule(StopRule):
    """Stop before a token whose alignment peaks within ``frames`` encoder frames of the end of the audio read.

    Args:
        frames: F >= 0 (0: stop only when the peak lies in the window's padding).
    """

    needs_alignment = True

    def __init__(self, frames: int = DEFAULT_FRAMES) -> None:
        if frames < 0:
            raise OptionError(f"AlignAtt needs a frame threshold F >= 0, got {frames}")
        self.frames = frames

    def start(self, model: DecoderModel, enc: Encoded, prefix: Sequence[int], costs: Costs) -> StopCheck:
        """The check for one chunk; raises OptionError for a model that does not report its cross-attention."""
        if not isinstance(model, AlignedDecoder):
            raise OptionError("the AlignAtt policy needs a model that reports its cross-attention (Whisper)")
        return _AttentionCheck(model, model.audio_frames(enc) - self.frames, costs)


class _AttentionCheck(StopCheck):
    def __init__(self, model: AlignedDecoder, limit: int, costs: Costs) -> None:
        self.model = model
        self.limit = limit  # the first frame the next token must not attend most
        self.costs = costs

    def __call__(self, tokens: Sequence[int], next_log_probs: torch.Tensor, state: object) -> bool:
        peak = int(torch.argmax(self.model.alignment(state)[0]))
        stop = peak >= self.limit
        self.costs.count("alignatt_checks")
        if stop:
            self.costs.count("alignatt_stops")
        return stop
