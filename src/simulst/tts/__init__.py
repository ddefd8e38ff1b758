"""Speech output (CMU IWSLT 2023 §3.3): synthesise each committed text increment and place it on a timeline.

* :mod:`simulst.tts.base` - the :class:`SpeechSynthesizer` interface (``synthesize(text) -> audio``).
* :mod:`simulst.tts.espeak` - espeak-ng (offline, many languages).
* :mod:`simulst.tts.timeline` - segments at max(end of previous, emission time); StartOffset / EndOffset; wav.
* :mod:`simulst.evaluation.asr_bleu` - ASR-BLEU with a target-language speech model.
"""
