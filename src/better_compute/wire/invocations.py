"""`endpoints.invoke` over HTTP (docs/endpoints.md#invoking-an-endpoint): the request body is the model's
input as raw bytes (any `Content-Type`, passed through), the component is named by SageMaker's header
or a query parameter, and the answer is the model server's own (status, `Content-Type`, body) with the
copy that answered named in `BC-Invoked-Copy: <component>:<index>`."""

from __future__ import annotations

COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"
"""The header naming the inference component (SageMaker's `InferenceComponentName`)."""

COMPONENT_QUERY = "inferenceComponentName"
"""The query parameter naming it, for a client that cannot set headers."""

INVOKED_COPY_HEADER = "BC-Invoked-Copy"
"""The copy that answered: `<component>:<index>` (as SageMaker's `X-Amzn-Invoked-Production-Variant`)."""

MAX_INVOKE_BODY_BYTES = 6 * 1024 * 1024
"""The largest request body `invoke` takes (SageMaker's real-time payload limit); the server's
`domain.endpoints.invoke_routing` holds the same number."""

__all__ = ["COMPONENT_HEADER", "COMPONENT_QUERY", "INVOKED_COPY_HEADER", "MAX_INVOKE_BODY_BYTES"]
