"""Stream framings: SSE (:mod:`ssetape.sse`), AWS event streams and NDJSON, by content type."""
