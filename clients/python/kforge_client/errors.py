"""kforge_client.errors -- the exceptions the client raises.

Every failure the service reports arrives as application/problem+json
(RFC 9457); the client raises it as a KforgeError carrying the problem's
fields, of the subclass its HTTP status names, so a notebook can write
``except kforge_client.NotFound``.  Failures that never reached the
service (no connection, a broken stream) are Unavailable or KforgeError
with ``status`` None.  No exception ever holds the client's token.
"""

import json

__all__ = [
    "KforgeError",
    "NotFound",
    "Unauthorized",
    "Forbidden",
    "Conflict",
    "Unprocessable",
    "RateLimited",
    "Unavailable",
    "WaitTimeout",
    "from_response",
]


class KforgeError(Exception):
    """A failed call: the problem+json fields the service sent.

    type, title, status, detail: as in RFC 9457 (status None when the
    service was never reached); errors: the list of
    ``{"field", "rule", "detail"}`` of a validation failure (empty
    otherwise); retry_after: seconds the service asked to wait, or None;
    instance and request_id: the path and the id the service's log names.
    """

    def __init__(self, title, status=None, detail="", type="about:blank", errors=None,
                 retry_after=None, instance=None, request_id=None):
        self.type = type
        self.title = title
        self.status = status
        self.detail = detail or ""
        self.errors = list(errors or [])
        self.retry_after = retry_after
        self.instance = instance
        self.request_id = request_id
        super().__init__(self._text())

    def _text(self):
        head = "%s %s" % (self.status, self.title) if self.status else self.title
        text = "%s: %s" % (head, self.detail) if self.detail else head
        if self.request_id:
            text += " (request %s)" % self.request_id
        return text

    def __repr__(self):
        return "%s(status=%r, type=%r, title=%r, detail=%r)" % (
            type(self).__name__, self.status, self.type, self.title, self.detail)


class NotFound(KforgeError):
    """404: no such job, artifact or route for this token (another user's
    job is not found, never forbidden, so ids do not leak)."""


class Unauthorized(KforgeError):
    """401: no token, or an unknown or revoked one."""


class Forbidden(KforgeError):
    """403: the token's role may not use the route."""


class Conflict(KforgeError):
    """409: the job is not in a state the request allows (cancelling a
    finished job), or an Idempotency-Key still in use."""


class Unprocessable(KforgeError):
    """422: a field breaks a rule; ``errors`` names each field and rule."""


class RateLimited(KforgeError):
    """429: too many failed authentications; ``retry_after`` says when to
    try again."""


class Unavailable(KforgeError):
    """503, or the service could not be reached at all (status None):
    PostgreSQL or the API is away; retry later."""


class WaitTimeout(KforgeError, TimeoutError):
    """Client.wait's timeout passed before the job ended (the job goes on)."""


_BY_STATUS = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Unprocessable,
    429: RateLimited,
    503: Unavailable,
}

# The longest error body read into an exception: a problem document is a
# few hundred bytes; anything longer is cut, never held whole.
MAX_PROBLEM_BYTES = 64 * 1024


def parse_retry_after(value):
    """Seconds from a Retry-After header (delta-seconds or an HTTP date),
    or None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        import email.utils
        import time

        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    return max(0, int(when.timestamp() - time.time() + 0.999))


def from_response(status, reason, body, retry_after_header=None, method="", path=""):
    """The exception for an HTTP answer that is not a success.

    body: the bytes of the answer (at most MAX_PROBLEM_BYTES are looked
    at).  A problem+json body gives the fields; any other body becomes the
    detail, cut short.  The class comes from the status (KforgeError for
    statuses without their own class).
    """
    cls = _BY_STATUS.get(status, KforgeError)
    retry_after = parse_retry_after(retry_after_header)
    text = body[:MAX_PROBLEM_BYTES].decode("utf-8", "replace") if body else ""
    doc = None
    if text:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
    if isinstance(doc, dict) and isinstance(doc.get("title"), str):
        errors = doc.get("errors")
        return cls(
            title=doc["title"],
            status=doc.get("status") if isinstance(doc.get("status"), int) else status,
            detail=doc.get("detail") if isinstance(doc.get("detail"), str) else "",
            type=doc.get("type") if isinstance(doc.get("type"), str) else "about:blank",
            errors=errors if isinstance(errors, list) else None,
            retry_after=retry_after,
            instance=doc.get("instance") if isinstance(doc.get("instance"), str) else None,
            request_id=doc.get("request_id") if isinstance(doc.get("request_id"), str) else None,
        )
    detail = " ".join(text.split())[:300]
    where = ("%s %s answered %d" % (method, path, status)) if method else ("answered %d" % status)
    return cls(title=reason or "HTTP %d" % status, status=status,
               detail="%s%s" % (where, (": " + detail) if detail else " with no problem document"),
               retry_after=retry_after)
