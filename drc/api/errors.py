"""Error answers: always ``{"error": code, "message": text, ...}`` JSON, never a stack trace.

Handlers raise :class:`ApiError`; :func:`install` maps it, FastAPI's own errors (unknown path,
wrong method, request validation) and anything unexpected (500, logged here with its traceback,
answered with a generic message) to that shape. Messages name what was wrong in the request;
they never carry a credential (the source is described by host:port only).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from drc.api import wire
from drc.api.metrics import ApiMetrics
from drc.core.errors import shown

log = logging.getLogger("drc.api")

_BY_STATUS = {
    400: wire.ERROR_BAD_REQUEST,
    401: wire.ERROR_UNAUTHORIZED,
    403: wire.ERROR_FORBIDDEN,
    404: wire.ERROR_NOT_FOUND,
    406: wire.ERROR_NOT_ACCEPTABLE,
    409: wire.ERROR_EPOCH_MISMATCH,
    410: wire.ERROR_SCN_TOO_OLD,
    416: wire.ERROR_RANGE,
    503: wire.ERROR_UNAVAILABLE,
}
INTERNAL_MESSAGE = "internal error; the server logged the details"


class ApiError(Exception):
    """An answer other than 200: status, error code, message and extra body fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _BY_STATUS.get(status, f"http_{status}")
        self.message = message
        self.headers = headers
        self.extra = extra

    def response(self) -> JSONResponse:
        body = {"error": self.code, "message": self.message, **self.extra}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "request refused"
    if exc.status_code == 404:
        message = f"no such resource {shown(request.url.path)}; see /v1/status, /v1/events"
    headers = dict(exc.headers) if exc.headers else None
    return ApiError(exc.status_code, message, headers=headers).response()


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', 'invalid')}"
        for err in exc.errors()
    )
    return ApiError(400, problems or "invalid request").response()


class Guard:
    """Outermost ASGI middleware: counts every answer by route and status, and turns an
    unexpected exception into a logged 500 with a generic body (not re-raised: the server's
    own error logging would print the traceback a second time)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = False

        async def sending(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                # Counted as it starts: a stream's response lasts as long as its reader.
                self.metrics.request(scope["method"], _route(scope), status)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            log.exception("unexpected error serving %s %s", scope["method"], scope["path"])
            status = 500
            if not started:
                response = ApiError(500, INTERNAL_MESSAGE, code=wire.ERROR_INTERNAL).response()
                await response(scope, receive, send)
        finally:
            if not started:
                self.metrics.request(scope["method"], _route(scope), status)


def _route(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
