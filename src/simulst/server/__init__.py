"""``simulst serve``: live streams over websockets (decoded in batches on a GPU, one stream per core on a CPU), a
web page, OpenAI-style file endpoints.

* :mod:`~simulst.server.protocol` - the websocket messages and the limits on what clients send.
* :mod:`~simulst.server.service` - the loaded model that opens streams.
* :mod:`~simulst.server.scheduler` - slots (one per stream) whose due work runs batched across streams, or as
  one job per stream (:mod:`simulst.streaming.batching`).
* :mod:`~simulst.server.app` - the ASGI app; :mod:`~simulst.server.openai_api` - the OpenAI endpoints.
"""
