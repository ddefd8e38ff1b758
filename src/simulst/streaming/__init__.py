"""Streams over shared engines: the onlinization loop, the one commit path, the MT stage and cascades.

* :mod:`simulst.streaming.engine` - ``Engine`` / ``Stream`` protocols and ``SpeechEngine``.
* :mod:`simulst.streaming.session` - ``Session``: one speech stream (chunking, search, policy, commit).
* :mod:`simulst.streaming.commit` - the commit path every stream shares (whole words, never retract).
* :mod:`simulst.streaming.mt_stage` - a cascade's simultaneous MT stage.
* :mod:`simulst.streaming.cascade` - ``CascadeEngine`` / ``CascadeSession``: ASR → MT (→ speech).
* :mod:`simulst.streaming.feed` - push a whole recording through a stream (fast or in real time).
"""
