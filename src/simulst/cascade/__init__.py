"""Cascades: streaming ASR → simultaneous MT (→ speech output), each stage onlinized with its own state.

* :mod:`simulst.cascade.pipeline` - :class:`CascadeSession` (the surface of :class:`simulst.session.Session`:
  ``push`` / ``finish`` / ``text`` / ``costs`` / ``emissions``) and :class:`CascadeModel` (the shared models;
  ``open(options)`` starts a stream), which the evaluation runner runs like a speech model.
* :mod:`simulst.cascade.mt_stage` - the MT stage: per committed source increment, translate the committed source
  prefix continuing the committed target (forced decoding), apply a policy, commit whole words; times stay on the
  audio timeline.
* :mod:`simulst.cascade.backend` - the MT backend interface; ``NeuralMT`` over any text decoder model.
* :mod:`simulst.cascade.hf_seq2seq` - MarianMT / M2M100 / NLLB / mBART-50 as a streaming decoder (KV cache).
* :mod:`simulst.cascade.apertium` - Apertium as a black box (re-translate, align to the committed words).
* :mod:`simulst.cascade.loading`, :mod:`simulst.cascade.cli` - ``load_mt``; ``simulst translate --to LANG``.
"""
