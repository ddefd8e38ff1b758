"""A CTC output for offline encoder-decoder models (2023 paper §3.5: a CTC from another model/vocabulary).

* :mod:`simulst.ctc.head` — a small character CTC head on a *frozen* encoder, its file format and how it attaches
  to a model (``load_model(..., ctc_head="default" | PATH)``: ``Encoded.ctc_log_probs`` / ``ctc_labels``).
* :mod:`simulst.ctc.text` — the character vocabulary, text normalisation, the offline English sentence list.
* :mod:`simulst.ctc.data` — synthetic training speech (espeak-ng, flite) with augmentation.
* :mod:`simulst.ctc.train` — encode once, train the head, evaluate greedy CTC CER/WER.
* :mod:`simulst.ctc.commands` — the ``simulst train-ctc`` subcommand.

The policy that uses the head is :mod:`simulst.policies.ctc_end`; joint CTC/attention search is
:mod:`simulst.search.ctc`.
"""
