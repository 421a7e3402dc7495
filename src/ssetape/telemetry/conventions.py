"""The OpenTelemetry GenAI semantic conventions, as ssetape fills them in (status: development).

Metric names are OpenTelemetry's Prometheus translation (``gen_ai.client.token.usage`` in
``{token}`` becomes ``gen_ai_client_token_usage_tokens``), attribute names likewise
(``gen_ai.operation.name`` becomes the label ``gen_ai_operation_name``). The bucket
boundaries are the conventions' explicit ones. ssetape's own words (an exchange's API, its
outcome, who failed) are labels beside them, prefixed ``ssetape_``.
"""

from __future__ import annotations

from ssetape.recording.protocol import StoredExchange
from ssetape.recording.stored import BOUNDS_S
from ssetape.vocabulary import TRANSPORT_ERRORS, Outcome, is_failed

__all__ = [
    "DURATION",
    "SECONDS_BOUNDS",
    "TIME_PER_OUTPUT_CHUNK",
    "TIME_TO_FIRST_CHUNK",
    "TOKEN_BOUNDS",
    "TOKEN_USAGE",
    "error_type",
    "operation_name",
    "provider_name",
]

DURATION = "gen_ai_client_operation_duration_seconds"
TIME_TO_FIRST_CHUNK = "gen_ai_client_operation_time_to_first_chunk_seconds"
TIME_PER_OUTPUT_CHUNK = "gen_ai_client_operation_time_per_output_chunk_seconds"
TOKEN_USAGE = "gen_ai_client_token_usage_tokens"

SECONDS_BOUNDS = BOUNDS_S  # duration, time to first chunk, time per output chunk
TOKEN_BOUNDS = tuple(float(4**i) for i in range(14))  # 1, 4, 16, ... 67108864

# gen_ai.operation.name of each API ssetape reads (analysis.apis); the well-known values.
_OPERATIONS = {
    "chat_completions": "chat",
    "responses": "chat",
    "messages": "chat",
    "cohere_chat": "chat",
    "bedrock_converse": "chat",
    "bedrock_invoke": "chat",
    "ollama": "chat",
    "interactions": "chat",
    "gemini": "generate_content",
    "images": "generate_content",
}
# gen_ai.provider.name: the provider a host is (suffixes match a whole domain) ...
_HOSTS = (
    ("api.openai.com", "openai"),
    (".openai.azure.com", "azure.ai.openai"),
    (".cognitiveservices.azure.com", "azure.ai.openai"),
    (".services.ai.azure.com", "azure.ai.inference"),
    ("api.anthropic.com", "anthropic"),
    ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("aiplatform.googleapis.com", "gcp.vertex_ai"),
    ("api.groq.com", "groq"),
    ("api.deepseek.com", "deepseek"),
    ("api.mistral.ai", "mistral_ai"),
    ("api.x.ai", "x_ai"),
    ("api.cohere.com", "cohere"),
    ("api.cohere.ai", "cohere"),
    ("api.perplexity.ai", "perplexity"),
    ("api.moonshot.ai", "moonshot_ai"),
    ("openrouter.ai", "openrouter"),
)
# ... else the one whose API it speaks: the conventions' "format flavor" (a gateway or a
# local server speaking OpenAI's API reads as openai).
_FLAVORS = {
    "chat_completions": "openai",
    "responses": "openai",
    "images": "openai",
    "messages": "anthropic",
    "gemini": "gcp.gen_ai",
    "interactions": "gcp.gen_ai",
    "bedrock_converse": "aws.bedrock",
    "bedrock_invoke": "aws.bedrock",
    "cohere_chat": "cohere",
    "ollama": "ollama",
}
UNKNOWN = "unknown"  # an API ssetape does not read, or an exchange not analysed


def operation_name(api: str | None) -> str:
    return _OPERATIONS.get(api or "", UNKNOWN)


def provider_name(api: str | None, host: str) -> str:
    host = host.lower().rstrip(".")
    for pattern, name in _HOSTS:
        if host == pattern.lstrip(".") or (pattern[0] == "." and host.endswith(pattern)):
            return name
        if pattern[0] != "." and host.endswith("-" + pattern):  # Vertex's regional hosts
            return name
    return _FLAVORS.get(api or "", UNKNOWN)


def error_type(x: StoredExchange) -> str:
    """``error.type`` of a failed exchange (vocabulary.is_failed): its outcome, or for one
    not analysed its transport's end; "" (no label) when it did not fail."""
    if not is_failed(x.outcome, x.status, x.state):
        return ""
    if x.outcome is not None:
        return x.outcome
    return x.state if x.state in TRANSPORT_ERRORS else Outcome.HTTP_ERROR.value
