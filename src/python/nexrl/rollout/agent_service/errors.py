"""Errors of the agent service, answered as OpenAI-style JSON bodies.

Every error is ``{"error": {"message", "type", "param", "code"}}`` with a 4xx/5xx
status, so an unmodified OpenAI client raises its usual exception with our message.
"""

from __future__ import annotations

from typing import Any

from nexrl.core.errors import NexrlError

__all__ = ["ServiceError"]


class ServiceError(NexrlError):
    """An error the service answers with ``status`` and a message naming the field/fix."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.code = code or str(status)
        self.type = type or ("invalid_request_error" if status < 500 else "upstream_error")
        self.details = details

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "code": self.code,
        }
        if self.details is not None:
            err["details"] = self.details
        return {"error": err}
