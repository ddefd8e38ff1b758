"""Training a CTC head on a frozen Whisper encoder: cache encoder frames once, then fit the head.

1. :func:`cache_features` packs the utterances of a manifest into windows of up to ``max_window_s`` seconds
   (several utterances with short pauses, or one), encodes each window once with the frozen encoder and keeps
   the frames of the audio part (``ceil(samples / 320)``; the 30 s window's padding frames are dropped, as at
   inference) with the window's normalised transcript. Windows of random length put the speech in every
   position of Whisper's 30 s window, as a growing stream does. A share of the windows is also encoded with the
   ``audio`` window (only the audio read, no padding), so the head works with both encoder windows.
2. :func:`train_head` fits the head with CTC loss (AdamW, linear warm-up then cosine decay) on the cached
   frames: the encoder never runs again, so an epoch costs only the head.
3. :func:`evaluate_head` reports greedy CTC character and word error rates on a manifest.
"""

from __future__ import annotations

import csv
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simulst.audio.io import load_audio
from simulst.errors import SimulstError
from simulst.models.ctc_head import SAMPLES_PER_FRAME, CtcHead, EncoderSignature, HeadConfig
from simulst.models.ctc_vocabulary import CharVocabulary, normalize
from simulst.models.mel import log_mel_spectrogram
from simulst.sequences import edit_distance

Log = Callable[[str], None]


@dataclass(frozen=True)
class Example:
    """One cached training window: (T, D) float16 frames and its label ids."""

    frames: torch.Tensor
    labels: tuple[int, ...]
    window: str


def read_manifest(path: Path) -> list[tuple[Path, str]]:
    """(audio path, transcript) rows of a TSV manifest with ``audio`` and ``transcript`` columns."""
    rows: list[tuple[Path, str]] = []
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if reader.fieldnames is None or not {"audio", "transcript"} <= set(reader.fieldnames):
            raise SimulstError(f"{path}: a manifest needs 'audio' and 'transcript' columns")
        for row in reader:
            audio = Path(row["audio"])
            rows.append((audio if audio.is_absolute() else path.parent / audio, row["transcript"]))
    return rows


def encoder_frames(model: Any, audio: np.ndarray, window: str) -> torch.Tensor:
    """(T_audio, D) frames of the frozen encoder over ``audio`` (``full`` 30 s window or ``audio`` window)."""
    n_mel = model.window_frames(audio.shape[0], window)
    with torch.inference_mode():
        mel = log_mel_spectrogram(torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)),
                                  model.dims.num_mel_bins, n_mel)
        frames = model.net.model.encoder(mel.unsqueeze(0).to(model.device))[0]
    keep = min(frames.shape[0], max(1, math.ceil(audio.shape[0] / SAMPLES_PER_FRAME)))
    return frames[:keep].to("cpu", torch.float16)


def pack_windows(durations: Sequence[float], rng: random.Random, max_window_s: float = 28.0,
                 single_share: float = 0.1) -> list[list[int]]:
    """Group utterance indices into windows: ``single_share`` hold one utterance, the others are filled up to a
    random target length in [14 s, max_window_s]."""
    order = list(range(len(durations)))
    rng.shuffle(order)
    windows: list[list[int]] = []
    current: list[int] = []
    total, target = 0.0, 0.0
    for i in order:
        if current and total + durations[i] + 0.6 > target:
            windows.append(current)
            current, total = [], 0.0
        if not current:
            target = 0.0 if rng.random() < single_share else rng.uniform(min(14.0, max_window_s), max_window_s)
        if durations[i] > max_window_s:
            continue
        current.append(i)
        total += durations[i] + 0.6
    if current:
        windows.append(current)
    return windows


def cache_features(
    model: Any,
    manifests: Sequence[Path],
    out_dir: Path,
    vocabulary: CharVocabulary,
    seed: int = 0,
    audio_window_share: float = 0.2,
    max_window_s: float = 28.0,
    log: Log = print,
) -> Path:
    """Encode the manifests' utterances once (see the module notes); returns the cache file.

    The cache (``out_dir/features.pt``) is reused when it exists.
    """
    out = out_dir / "features.pt"
    if out.is_file():
        log(f"reusing cached encoder frames {out}")
        return out
    rows = [row for manifest in manifests for row in read_manifest(manifest)]
    if not rows:
        raise SimulstError("no training utterances")
    rng = random.Random(seed)
    audios = [load_audio(path) for path, _ in rows]
    windows = pack_windows([a.shape[0] / 16000 for a in audios], rng, max_window_s)
    log(f"read {len(rows)} utterances; encoding {len(windows)} windows")
    frames: list[torch.Tensor] = []
    labels: list[list[int]] = []
    kinds: list[str] = []
    start = time.perf_counter()
    for n, group in enumerate(windows):
        pieces: list[np.ndarray] = []
        for i in group:
            if pieces:
                pieces.append(np.zeros(int(rng.uniform(0.1, 0.6) * 16000), dtype=np.float32))
            pieces.append(audios[i])
        audio = np.concatenate(pieces)
        label = vocabulary.encode(" ".join(rows[i][1] for i in group))
        for window in ("full", "audio") if rng.random() < audio_window_share else ("full",):
            x = encoder_frames(model, audio, window)
            if len(label) == 0 or x.shape[0] < len(label) + 2:
                continue
            frames.append(x)
            labels.append(label)
            kinds.append(window)
        if (n + 1) % 50 == 0:
            log(f"encoded {n + 1}/{len(windows)} windows ({time.perf_counter() - start:.0f} s)")
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"frames": frames, "labels": labels, "windows": kinds, "utterances": len(rows),
                "seconds": sum(a.shape[0] for a in audios) / 16000}, out)
    log(f"cached {len(frames)} windows from {len(rows)} utterances in {time.perf_counter() - start:.0f} s -> {out}")
    return out


def load_examples(path: Path) -> tuple[list[Example], dict[str, Any]]:
    """The examples of a :func:`cache_features` file and its summary fields."""
    data = torch.load(path, weights_only=False)
    examples = [Example(f, tuple(lab), w) for f, lab, w in zip(data["frames"], data["labels"], data["windows"],
                                                                 strict=True)]
    return examples, {"utterances": data["utterances"], "seconds": data["seconds"]}


def _batches(examples: Sequence[Example], batch_frames: int, rng: random.Random) -> list[list[Example]]:
    """Length-bucketed batches of at most ``batch_frames`` padded frames."""
    order = sorted(examples, key=lambda e: e.frames.shape[0] + rng.random() * 50)
    batches: list[list[Example]] = []
    current: list[Example] = []
    for ex in order:
        longest = max([ex.frames.shape[0], *(e.frames.shape[0] for e in current)])
        if current and longest * (len(current) + 1) > batch_frames:
            batches.append(current)
            current = []
        current.append(ex)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def _ctc_loss(head: CtcHead, batch: Sequence[Example]) -> torch.Tensor:
    lengths = torch.tensor([e.frames.shape[0] for e in batch])
    frames = torch.nn.utils.rnn.pad_sequence([e.frames.float() for e in batch], batch_first=True)
    targets = torch.tensor([t for e in batch for t in e.labels], dtype=torch.long)
    target_lengths = torch.tensor([len(e.labels) for e in batch])
    log_probs = head(frames).transpose(0, 1)  # (T, B, V)
    return torch.nn.functional.ctc_loss(log_probs, targets, lengths, target_lengths, blank=0,
                                        reduction="sum", zero_infinity=True) / float(target_lengths.sum())


def train_head(
    examples: Sequence[Example],
    config: HeadConfig,
    epochs: int = 8,
    batch_frames: int = 3000,
    lr: float = 3e-3,
    seed: int = 0,
    max_steps: int | None = None,
    log: Log = print,
) -> tuple[CtcHead, dict[str, Any]]:
    """Fit a fresh head on cached examples (2 % held out for a validation loss); returns it and a summary."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    shuffled = list(examples)
    rng.shuffle(shuffled)
    n_valid = max(1, len(shuffled) // 50) if len(shuffled) >= 20 else 0
    valid, train = shuffled[:n_valid], shuffled[n_valid:]
    head = CtcHead(config)
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.01)
    steps_per_epoch = len(_batches(train, batch_frames, random.Random(0)))
    total = steps_per_epoch * epochs if max_steps is None else min(max_steps, steps_per_epoch * epochs)
    warmup = max(1, min(200, total // 10))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, total)))))
    step = 0
    start = time.perf_counter()
    history: list[dict[str, float]] = []
    for epoch in range(epochs):
        head.train()
        running, count = 0.0, 0
        for batch in _batches(train, batch_frames, rng):
            loss = _ctc_loss(head, batch)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 5.0)
            optimizer.step()
            schedule.step()
            running += loss.item()
            count += 1
            step += 1
            if step % 50 == 0:
                log(f"step {step}/{total} loss {running / count:.3f} ({time.perf_counter() - start:.0f} s)")
            if step >= total:
                break
        valid_loss = _validation_loss(head, valid, batch_frames)
        history.append({"epoch": epoch + 1, "train_loss": running / max(1, count), "valid_loss": valid_loss})
        log(f"epoch {epoch + 1}: train loss {running / max(1, count):.3f}, valid loss {valid_loss:.3f}")
        if step >= total:
            break
    head.eval()
    summary = {"steps": step, "epochs": len(history), "seconds": round(time.perf_counter() - start, 1),
               "history": history, "lr": lr, "batch_frames": batch_frames, "seed": seed,
               "train_windows": len(train), "valid_windows": len(valid)}
    return head, summary


def _validation_loss(head: CtcHead, valid: Sequence[Example], batch_frames: int) -> float:
    if not valid:
        return float("nan")
    head.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in _batches(valid, batch_frames, random.Random(0)):
            total += float(_ctc_loss(head, batch)) * len(batch)
            count += len(batch)
    head.train()
    return total / count


@dataclass(frozen=True)
class HeadScore:
    """Greedy CTC error rates on a manifest (references :func:`normalize`-d).

    Attributes:
        cer, wer: character / word error rate (edits / reference length, pooled over utterances).
        utterances: number scored.
        outputs: (reference, hypothesis) per utterance.
    """

    cer: float
    wer: float
    utterances: int
    outputs: tuple[tuple[str, str], ...]


def evaluate_head(model: Any, head: CtcHead, manifests: Sequence[Path], window: str = "full") -> HeadScore:
    """Greedy CTC decoding of every utterance (whole-utterance encoding) against its normalised transcript."""
    char_edits = char_total = word_edits = word_total = 0
    outputs: list[tuple[str, str]] = []
    for manifest in manifests:
        for path, transcript in read_manifest(manifest):
            audio = load_audio(path)
            log_probs = head.log_probs(encoder_frames(model, audio, window).float())
            hyp = head.vocabulary.greedy(log_probs.argmax(-1).tolist())
            ref = normalize(transcript)
            char_edits += edit_distance(ref, hyp)
            char_total += len(ref)
            word_edits += edit_distance(ref.split(), hyp.split())
            word_total += len(ref.split())
            outputs.append((ref, hyp))
    return HeadScore(char_edits / max(1, char_total), word_edits / max(1, word_total), len(outputs),
                     tuple(outputs))


def new_config(model: Any, name: str, hidden: int = 192, kernel: int = 5, layers: int = 2,
               windows: Sequence[str] = ("full", "audio")) -> HeadConfig:
    """A head config for ``model``'s encoder with the character vocabulary."""
    vocabulary = CharVocabulary()
    return HeadConfig(d_model=model.dims.d_model, symbols=vocabulary.symbols,
                      encoder=EncoderSignature.of(model, name), hidden=hidden, kernel=kernel, layers=layers,
                      window=tuple(windows))
