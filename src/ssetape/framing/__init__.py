"""Every wire format, each sans-IO: SSE (:mod:`ssetape.framing.sse`), AWS event streams, NDJSON,
JSON arrays sent in pieces, the JSON span scanner, and the content decoders; which one a
stream is read with, by content type (:mod:`ssetape.framing.framings`)."""
