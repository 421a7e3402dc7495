"""Every wire format, each sans-IO: SSE (:mod:`ssetape.framing.sse`), AWS event streams, NDJSON,
JSON arrays sent in pieces, the JSON span scanner, the content decoders, and WebSocket frames
(:mod:`ssetape.framing.websocket`, for replayed sessions); which one a stream is read with, by
content type (:mod:`ssetape.framing.framings`)."""
