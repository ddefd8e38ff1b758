"""The recipe that trains a CTC output for offline encoder-decoder models (Polák et al., IWSLT 2023, §3.5: a CTC of
another vocabulary than the decoder's).

* :mod:`simulst.ctc.text` — an offline English sentence list.
* :mod:`simulst.ctc.data` — synthetic training speech (espeak-ng, flite) with augmentation.
* :mod:`simulst.ctc.train` — encode once, train the head, evaluate greedy CTC CER/WER.

The head itself is a model component (:mod:`simulst.models.ctc_head`, its labels :mod:`simulst.models.ctc_vocabulary`;
``load_model(..., ctc_head="default" | PATH)``); the ``simulst train-ctc`` command is :mod:`simulst.cli.ctc`. The
CTC online policy is :mod:`simulst.policies.ctc_end` (its end test: :mod:`simulst.search.ctc_end`); joint
CTC/attention scoring is :mod:`simulst.search.joint`.
"""
