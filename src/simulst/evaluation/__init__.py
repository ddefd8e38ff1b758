"""simulst.evaluation: run test sets through streams and score them as SimulEval and OmniSTEval do.

One module a job:

* :mod:`~simulst.evaluation.manifest` — test sets (TSV manifests, SimulEval's list files).
* :mod:`~simulst.evaluation.runner` — stream a test set into a resumable, SimulEval-compatible output folder.
* :mod:`~simulst.evaluation.instances` — the ``instances.log`` format (one JSON record per instance).
* :mod:`~simulst.evaluation.latency` — the short-form latency metrics, one registered formula each.
* :mod:`~simulst.evaluation.quality` — the registered quality metrics (BLEU, chrF, WER, WER_norm, WER_whisper).
* :mod:`~simulst.evaluation.bootstrap` — paired bootstrap intervals of a difference between two configurations.
* :mod:`~simulst.evaluation.report` — the report both scorers build (:class:`~simulst.evaluation.report.
  ReportBuilder`), its table and its files.
* :mod:`~simulst.evaluation.scoring` — short-form scoring: one instance per utterance.
* :mod:`~simulst.evaluation.longform` — long-form scoring: one instance per talk, resegmented onto its reference
  sentences (a package: inputs, align, resegment, metrics, scoring).
* :mod:`~simulst.evaluation.sweep`, :mod:`~simulst.evaluation.plots` — grids of configurations, their tables
  and quality-latency plots.
* :mod:`~simulst.evaluation.asr_bleu` — ASR-BLEU of speech output.
"""
