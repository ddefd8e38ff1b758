"""Greedy CTC error rates of the shipped character CTC head (Whisper tiny.en) on the real shared English sets.

Writes bench/results/ctc_head.md: CER / WER per set and encoder window (references normalised: lower case, no
punctuation, numbers spelled out), the per-utterance outputs, and the head's training summary.

    OMP_NUM_THREADS=1 .venv/bin/python bench/ctc_head.py [--head PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, WHISPER_TINY_EN, machine_note, markdown_table
from simulst.ctc.train import evaluate_head
from simulst.models.loading import load_model

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", default="default")
    args = parser.parse_args()
    model = load_model(str(WHISPER_TINY_EN), ctc_head=args.head)
    assert model.ctc_head is not None
    rows: list[dict[str, object]] = []
    outputs: list[str] = []
    for name in ("jfk", "fleurs-en-dev"):
        for window in ("full", "audio"):
            score = evaluate_head(model, model.ctc_head, [DATA / f"{name}.tsv"], window=window)
            rows.append({"set": name, "window": window, "utterances": score.utterances, "CER": 100 * score.cer,
                         "WER": 100 * score.wer})
            print(markdown_table(rows[-1:], list(rows[0])).splitlines()[-1], flush=True)
            if window == "full":
                outputs += [f"- REF `{ref}`\n  HYP `{hyp}`" for ref, hyp in score.outputs]
    all_rows = [r for r in rows if r["window"] == "full"]
    training = dict(model.ctc_head.config.training)
    training.pop("history", None)
    config = model.ctc_head.config
    text = (
        "# The shipped character CTC head on Whisper tiny.en: greedy CTC error rates\n\n"
        "Written by `bench/ctc_head.py`. Whole-utterance encoding, greedy CTC (best path, repeats merged, blanks "
        "dropped); references normalised like the training text (`simulst.ctc.text.normalize`). CER and WER in %. "
        "The head never saw real speech: it was trained on synthetic espeak-ng/flite speech only.\n\n"
        f"Head: `{config.encoder.name}`, {config.layers} conv layer(s) of width {config.hidden}, "
        f"kernel {config.kernel}, {len(config.symbols)} labels, windows {', '.join(config.window)}.\n\n"
        + markdown_table(rows, ["set", "window", "utterances", "CER", "WER"])
        + f"\n\nUtterances (full window), {sum(int(str(r['utterances'])) for r in all_rows)} in all:\n\n"
        + "\n".join(outputs)
        + "\n\nTraining summary (from the head's metadata):\n\n```json\n"
        + json.dumps(training, indent=1, sort_keys=True)
        + f"\n```\n\nRun: {machine_note()}.\n"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ctc_head.md").write_text(text)


if __name__ == "__main__":
    main()
