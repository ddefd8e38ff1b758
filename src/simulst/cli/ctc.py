"""``simulst train-ctc``: train a character CTC head on a frozen Whisper encoder.

Reproduces the shipped head (``simulst/assets/ctc/whisper-tiny.en-char.safetensors``)::

    simulst train-ctc --model ../shared/models/whisper-tiny.en --synthesize 3000 --work-dir /tmp/ctc-work \\
        --threads 2 --out src/simulst/assets/ctc/whisper-tiny.en-char.safetensors \\
        --eval ../shared/data/jfk.tsv ../shared/data/fleurs-en-dev.tsv

(Synthesis needs espeak-ng, which scripts/setup.sh installs; the shipped head's recipe also had flite, which the
set-up does not install: apt-get install flite first - without it espeak-ng voices every utterance and the corpus
differs. The training run and its steps' times: ``bench/results/ctc_head.md``.)

Steps (each reuses its output in ``--work-dir`` when present): synthesise ``--synthesize N`` utterances with
espeak-ng, and flite where installed (:mod:`simulst.ctc.data`), from the first N sentences of the shipped English
list (harvested offline from Python's documentation, manual pages and license texts: :mod:`simulst.ctc.text`)
and/or read ``--manifest`` TSVs (``audio`` + ``transcript`` columns, like ``../shared/data/*.tsv``); encode them
once with the frozen encoder; train the head; save it; report greedy CTC CER/WER on ``--eval`` manifests.
``python -m simulst.cli.ctc ...`` works too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from simulst.errors import SimulstError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train-ctc`` options."""
    p.add_argument("--model", default=None, help="Whisper checkpoint whose frozen encoder the head reads "
                                                 "(default: the offline Whisper tiny.en)")
    p.add_argument("--out", required=True, help="where to write the head (.safetensors)")
    p.add_argument("--manifest", nargs="*", default=[], help="training TSVs with 'audio' and 'transcript' columns")
    p.add_argument("--synthesize", type=int, default=0, metavar="N",
                   help="synthesise N training utterances with espeak-ng (and flite, where installed) from the first N "
                        "sentences of --sentences")
    p.add_argument("--sentences", default=None, metavar="FILE",
                   help="sentence list for --synthesize, one per line (.gz ok); default: the shipped English list "
                        "(5000 sentences harvested offline; python -m simulst.ctc.text makes one)")
    p.add_argument("--work-dir", default="ctc-work", help="synthetic corpus and encoder-frame cache (reused)")
    p.add_argument("--eval", nargs="*", default=[], help="manifests to report greedy CTC CER/WER on")
    p.add_argument("--epochs", type=int, default=4, help="passes over the training windows (default 4)")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many updates")
    p.add_argument("--hidden", type=int, default=192, help="head width H (default 192)")
    p.add_argument("--layers", type=int, default=2, help="residual convolution blocks (default 2)")
    p.add_argument("--kernel", type=int, default=5, help="convolution width (default 5)")
    p.add_argument("--batch-frames", type=int, default=3000, help="padded encoder frames per batch (default 3000)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--audio-window-share", type=float, default=0.2,
                   help="share of windows also encoded with the 'audio' window (default 0.2)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the synthesis (voices, augmentation), the windows' packing and the training "
                        "(default 0)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--workers", type=int, default=2, help="parallel synthesis processes")
    p.add_argument("--device", default="cpu",
                   help="torch device of the frozen encoder (cpu, cuda, ...); the head trains on the CPU "
                        "(default cpu)")


def register(subparsers: Any) -> None:
    """Add the ``train-ctc`` subcommand to the ``simulst`` parser."""
    p = subparsers.add_parser("train-ctc", help="train a character CTC head on a frozen Whisper encoder",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run_train_ctc)


def _log(message: str) -> None:
    print(f"[train-ctc {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_train_ctc(args: argparse.Namespace) -> int:
    """The ``train-ctc`` subcommand."""
    import torch  # (the recipe's modules load torch: imported here, so that the parser and its help do not wait)

    from simulst.ctc.data import synthesize_corpus
    from simulst.ctc.text import load_sentences
    from simulst.ctc.train import cache_features, evaluate_head, load_examples, new_config, train_head
    from simulst.models.ctc_vocabulary import CharVocabulary
    from simulst.models.loading import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.synthesize <= 0 and not args.manifest:
        raise SimulstError("nothing to train on: pass --manifest TSV and/or --synthesize N")
    started = time.perf_counter()
    work = Path(args.work_dir)
    manifests = [Path(m) for m in args.manifest]
    if args.synthesize > 0:
        corpus = work / "corpus"
        sentences = load_sentences(args.sentences)[: args.synthesize]
        if len(sentences) < args.synthesize:
            _log(f"only {len(sentences)} sentences available")
        _log(f"synthesising {len(sentences)} utterances into {corpus} (existing audio files are reused)")
        manifests.append(synthesize_corpus(sentences, corpus, seed=args.seed, workers=args.workers))
    model = load_model(args.model, device=args.device)
    name = Path(args.model).name if args.model else "whisper-tiny.en"
    vocabulary = CharVocabulary()
    cache_dir = work / f"features-{_fingerprint(manifests, args)}"
    cache = cache_features(model, manifests, cache_dir, vocabulary, seed=args.seed,
                           audio_window_share=args.audio_window_share, log=_log)
    examples, data_info = load_examples(cache)
    config = new_config(model, name, hidden=args.hidden, kernel=args.kernel, layers=args.layers)
    _log(f"training on {len(examples)} windows ({data_info['seconds'] / 3600:.2f} h of speech)")
    head, summary = train_head(examples, config, epochs=args.epochs, batch_frames=args.batch_frames, lr=args.lr,
                               seed=args.seed, max_steps=args.max_steps, log=_log)
    scores: dict[str, dict[str, float]] = {}
    for manifest_name in args.eval:
        for window in ("full", "audio"):
            score = evaluate_head(model, head, [Path(manifest_name)], window=window)
            scores[f"{Path(manifest_name).stem}/{window}"] = {"cer": round(score.cer, 4), "wer": round(score.wer, 4)}
            _log(f"{manifest_name} ({window} window): CER {score.cer:.3f} WER {score.wer:.3f}")
            for ref, hyp in score.outputs:
                _log(f"  REF {ref}\n  HYP {hyp}")
    training = {
        **summary,
        "data": {"synthesized": args.synthesize, "manifests": [str(m) for m in args.manifest],
                 "utterances": data_info["utterances"], "hours": round(data_info["seconds"] / 3600, 3),
                 "audio_window_share": args.audio_window_share},
        "eval": scores,
        "options": {k: v for k, v in vars(args).items() if k != "func"},
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    path = head.save(args.out, replace(config, training=training))
    size = path.stat().st_size
    _log(f"wrote {path} ({size / 1e6:.2f} MB) in {training['total_seconds']:.0f} s")
    print(json.dumps({"out": str(path), "bytes": size, "eval": scores}), flush=True)
    return 0


def _fingerprint(manifests: Sequence[Path], args: argparse.Namespace) -> str:
    """A short hash of what the encoder-frame cache depends on (manifests, seed, audio-window share, model)."""
    digest = hashlib.sha1()
    for manifest in manifests:
        digest.update(manifest.read_bytes())
    digest.update(f"{args.seed} {args.audio_window_share} {args.model}".encode())
    return digest.hexdigest()[:10]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulst.cli.ctc``: the ``train-ctc`` subcommand on its own."""
    parser = argparse.ArgumentParser(prog="simulst train-ctc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_train_ctc(args)
    except SimulstError as err:
        print(f"simulst train-ctc: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
