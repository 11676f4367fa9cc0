"""kforge_client._http -- one HTTP exchange with kforge-api, with retries.

The transport owns the base URL and the token; it opens one connection per
request (http.client, no proxy, no redirect following) and closes it when
the answer is read, or hands an event stream's open response to the
caller, who closes it.

Failure behaviour: an answer that is not 2xx raises the KforgeError
subclass of its status (errors.from_response).  A call marked retryable
(GET, and POST with an Idempotency-Key) is repeated on 503 and 429, on a
409 "idempotency-key-in-use", and when the connection fails, at most
`retries` times, waiting Retry-After when the service gives it (at most
MAX_RETRY_AFTER) and an exponential backoff otherwise; once the retries
are spent the last failure is raised (a connection that never opened is
Unavailable with status None).  Answers are read up to a byte limit
(KforgeError past it), so a hostile or broken server cannot fill memory.
The token goes into the Authorization header and nowhere else: not into
repr(), exceptions or logs.
"""

import http.client
import json
import random
import socket
import time
import urllib.parse

from . import errors

__version__ = "0.1.0"

MAX_RETRY_AFTER = 120.0          # seconds: a longer Retry-After is cut to this
MAX_JSON_BYTES = 256 * 1024 * 1024
_RETRY_STATUS = (429, 503)


class Transport:
    """See the module's comment.  timeout: seconds for connecting and for
    each read; retries: how many times a retryable call is repeated;
    backoff: the first wait, in seconds, doubled each time (with jitter,
    at most 30 s)."""

    def __init__(self, url, token, timeout, retries, backoff):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("kforge URL must be http://HOST[:PORT] or https://HOST[:PORT], not %r" % url)
        if parts.query or parts.fragment:
            raise ValueError("kforge URL must not carry a query or a fragment: %r" % url)
        if any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
            raise ValueError("the token holds spaces or control characters; pass the kf_... value that "
                             "`kforge-api token create` printed")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.url = "%s://%s%s" % (parts.scheme, parts.netloc.rpartition("@")[2], self.prefix)
        self._token = token
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0:
            raise ValueError("timeout must be > 0, retries and backoff >= 0")

    def _connect(self, timeout):
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _headers(self, extra):
        h = {
            "Authorization": "Bearer " + self._token,
            "User-Agent": "kforge-client-python/" + __version__,
            "Accept": "application/json",
        }
        h.update(extra or {})
        return h

    def target(self, path, query=None):
        """The request target: prefix + path + the encoded query (a list of
        pairs or a dict; None values are left out)."""
        items = query.items() if isinstance(query, dict) else (query or [])
        pairs = [(k, v) for k, v in items if v is not None]
        return self.prefix + path + ("?" + urllib.parse.urlencode(pairs) if pairs else "")

    def _wait(self, attempt, retry_after):
        if retry_after is not None:
            delay = min(float(retry_after), MAX_RETRY_AFTER)
        else:
            delay = min(self.backoff * (2 ** attempt), 30.0)
            delay = delay / 2 + random.random() * delay / 2
        time.sleep(delay)

    def _unreachable(self, method, target, exc):
        return errors.Unavailable(
            title="Service unreachable",
            detail="%s %s%s failed: %s; check that kforge-api runs there (KFORGE_URL)"
            % (method, self.url, target[len(self.prefix):].split("?")[0], exc or "the connection closed"))

    def _retryable_answer(self, status, body):
        if status in _RETRY_STATUS:
            return True
        if status == 409:
            # an Idempotency-Key whose first request is still being served
            try:
                doc = json.loads(body[: errors.MAX_PROBLEM_BYTES].decode("utf-8", "replace"))
            except ValueError:
                return False
            return isinstance(doc, dict) and str(doc.get("type", "")).endswith(":idempotency-key-in-use")
        return False

    def _open(self, method, target, body, headers, timeout):
        conn = self._connect(timeout)
        try:
            conn.request(method, target, body=body, headers=self._headers(headers))
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def open(self, method, path, query=None, body=None, headers=None, retry=False, timeout=None, stream=False,
             max_bytes=MAX_JSON_BYTES):
        """One call.  body: a JSON-able value (sent as application/json) or
        None.  Returns (status, headers, bytes) for a 2xx answer or, with
        stream=True, (status, headers, (connection, response)) still open:
        the caller reads and closes both."""
        target = self.target(path, query)
        data = None
        headers = dict(headers or {})
        if body is not None:
            data = json.dumps(body, allow_nan=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        attempt = 0
        while True:
            last = attempt >= self.retries or not retry
            try:
                conn, resp = self._open(method, target, data, headers, timeout or self.timeout)
            except (OSError, http.client.HTTPException) as exc:
                if last:
                    raise self._unreachable(method, target, exc) from None
                self._wait(attempt, None)
                attempt += 1
                continue
            status = resp.status
            if 200 <= status < 300 and stream:
                return status, resp.headers, (conn, resp)
            try:
                if 200 <= status < 300:
                    payload = _read_all(resp, max_bytes)
                else:
                    payload = _read_all(resp, errors.MAX_PROBLEM_BYTES, cut=True)
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if last:
                    raise self._unreachable(method, target, exc) from None
                self._wait(attempt, None)
                attempt += 1
                continue
            finally:
                conn.close()
            if 200 <= status < 300:
                return status, resp.headers, payload
            if not last and self._retryable_answer(status, payload):
                self._wait(attempt, errors.parse_retry_after(resp.headers.get("Retry-After")))
                attempt += 1
                continue
            raise errors.from_response(status, resp.reason, payload, resp.headers.get("Retry-After"), method,
                                       target[len(self.prefix):].split("?")[0])

    def json(self, method, path, query=None, body=None, headers=None, retry=False):
        """open() for a JSON answer: the decoded document."""
        _, _, payload = self.open(method, path, query, body, headers, retry)
        try:
            return json.loads(payload.decode("utf-8"))
        except (ValueError, RecursionError):
            raise errors.KforgeError(title="Bad response",
                                     detail="%s %s answered with a body that is not JSON" % (method, path)) from None


def _read_all(resp, max_bytes, cut=False):
    """The answer's body, refusing one longer than max_bytes (or, with cut,
    its first max_bytes only: for an error's problem document)."""
    chunks = []
    total = 0
    while True:
        chunk = resp.read(min(1 << 20, max_bytes + 1 - total))
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            _close_quietly(resp)
            if cut:
                chunks.append(chunk)
                return b"".join(chunks)[:max_bytes]
            raise errors.KforgeError(title="Response too large",
                                     detail="the answer is longer than %d bytes" % max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _close_quietly(resp):
    try:
        resp.close()
    except (OSError, http.client.HTTPException, socket.timeout):
        pass
