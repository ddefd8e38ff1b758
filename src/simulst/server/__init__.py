"""``simulst serve``: live streams over websockets, decoded in batches, a web page, OpenAI-style file endpoints.

* :mod:`~simulst.server.protocol` - the websocket messages and the limits on what clients send.
* :mod:`~simulst.server.service` - the loaded model that opens streams.
* :mod:`~simulst.server.scheduler` - slots (one per stream) whose due work runs batched across streams.
* :mod:`~simulst.server.app` - the ASGI app; :mod:`~simulst.server.openai_api` - the OpenAI endpoints.
"""
