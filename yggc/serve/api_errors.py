"""Errors as the OpenAI API returns them: a 4xx status with {"error": {message, type, param, code}}.

Bad input never becomes a 500: every check in params.py and app.py raises ApiError with its status.
"""
from __future__ import annotations


class ApiError(Exception):
    """status: 400 bad input, 401 key, 404 model or route, 408 a request too slow to arrive, 413 body,
    414 URL, 429 queue full, 431 headers; message: one line, what is wrong and what to send instead; param:
    the request field at fault; code: OpenAI's machine-readable code (e.g. "context_length_exceeded");
    headers: sent with the answer (Retry-After, Connection)."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers

    def body(self) -> dict:
        """The JSON object an OpenAI client parses into its APIStatusError."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_param(param: str, message: str, code: str | None = "invalid_value") -> ApiError:
    """400 for one request field."""
    return ApiError(400, message, param=param, code=code)


def unsupported(param: str, what: str) -> ApiError:
    """400 for an OpenAI feature this server does not implement (rather than silently ignoring it)."""
    return ApiError(400, f"{what} is not supported by yggc serve", param=param, code="unsupported_parameter")
