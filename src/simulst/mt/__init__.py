"""MT backends of a cascade's MT stage (:mod:`simulst.streaming.mt_stage`): shared, stateless translators.

* :mod:`simulst.mt.backend` - the backend interface; ``NeuralMT`` over any text decoder model (forced decoding of
  the committed target with the searchers of :mod:`simulst.search`).
* :mod:`simulst.mt.hf_seq2seq` - MarianMT / M2M100 / NLLB / mBART-50 as a streaming decoder (KV cache).
* :mod:`simulst.mt.apertium` - Apertium as a black box (re-translate, align to the committed words).
* :mod:`simulst.mt.options`, :mod:`simulst.mt.loading` - ``MTOptions``; ``load_mt`` by name.
"""
