"""One table from engine errors to HTTP status + OpenAI error type, and the handlers using it.

Every error leaves the server in the OpenAI shape ``{"error": {"message", "type", "param",
"code"}}``; unexpected exceptions are logged with their stack and answered with a generic message
(never the stack trace).
"""

from __future__ import annotations

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import EngineError

log = logging.getLogger(__name__)

# engine error kind -> (HTTP status, OpenAI error type)
ERROR_TABLE: dict[str, tuple[int, str]] = {
    "invalid_request": (400, "invalid_request_error"),
    "authentication": (401, "authentication_error"),
    "not_found": (404, "not_found_error"),
    "too_large": (413, "invalid_request_error"),
    "unsupported_media": (415, "invalid_request_error"),
    "validation": (422, "invalid_request_error"),
    "overloaded": (429, "rate_limit_error"),
    "unavailable": (503, "service_unavailable_error"),
    "internal": (500, "server_error"),
}

_STATUS_KIND = {status: kind for kind, (status, _) in ERROR_TABLE.items()}


class AuthError(EngineError):
    kind = "authentication"


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    kind: str, message: str, param: str | None = None, code: str | None = None
) -> JSONResponse:
    status, type_ = ERROR_TABLE.get(kind, ERROR_TABLE["internal"])
    return JSONResponse(error_body(message, type_, param, code), status_code=status)


def engine_error_response(exc: EngineError) -> JSONResponse:
    return error_response(exc.kind, exc.message, exc.param, exc.code)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(EngineError)
    async def _engine(_: Request, exc: EngineError) -> JSONResponse:
        if exc.kind == "internal":
            log.error("engine error: %s", exc.message)
        return engine_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
        param = ".".join(loc) or None
        msg = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            return error_response("invalid_request", f"request body is not valid JSON: {msg}")
        detail = f"{param}: {msg}" if param else msg
        return error_response("validation", detail, param=param, code=first.get("type"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = _STATUS_KIND.get(exc.status_code, "invalid_request")
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 405:
            message = "method not allowed"
        resp = error_response(kind, message)
        resp.status_code = exc.status_code
        return resp

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_response("internal", "internal server error; see the server log")
