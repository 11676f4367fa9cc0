"""A scripted kforge-api for the client's unit tests: an HTTP server on a
free loopback port, in a thread, whose answers come from a function the
test gives.  It records every request (method, path, query, headers,
body) so a test can check what the client sent.  Not a test module itself
(unittest discovery reads test*.py only).
"""

import http.server
import json
import os
import sys
import threading
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

TOKEN = "kf_secret_alice_0123456789"


class Request:
    def __init__(self, method, path, query, headers, body):
        self.method = method
        self.path = path
        self.query = query          # list of (name, value), decoded
        self.headers = headers      # dict, names lower-cased
        self.body = body

    def arg(self, name):
        values = [v for k, v in self.query if k == name]
        return values[-1] if values else None

    def json(self):
        return json.loads(self.body.decode("utf-8"))


class Reply:
    """status, headers (dict), body (bytes); or chunks: a list of bytes
    written one by one (flushed) before the connection closes."""

    def __init__(self, status=200, body=b"", headers=None, chunks=None):
        self.status = status
        self.headers = dict(headers or {})
        self.body = body
        self.chunks = chunks


def json_reply(status, doc, headers=None):
    h = {"Content-Type": "application/json" if status < 400 else "application/problem+json"}
    h.update(headers or {})
    return Reply(status, json.dumps(doc).encode("utf-8"), h)


def problem(status, slug, title, detail, retry_after=None, **more):
    doc = {"type": "urn:kforge:problem:" + slug, "title": title, "status": status, "detail": detail,
           "instance": "/x", "request_id": "6b0d44af00000004"}
    doc.update(more)
    return json_reply(status, doc, {"Retry-After": str(retry_after)} if retry_after is not None else None)


class FakeServer:
    """with FakeServer(handler) as srv: srv.url, srv.requests.  handler(req)
    returns a Reply; a request without one of `tokens` is answered 401 first."""

    def __init__(self, handler, tokens=(TOKEN,)):
        self.handler = handler
        self.tokens = tokens
        self.requests = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self):
                parts = urllib.parse.urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                req = Request(self.command, parts.path, urllib.parse.parse_qsl(parts.query, keep_blank_values=True),
                              {k.lower(): v for k, v in self.headers.items()}, body)
                outer.requests.append(req)
                if req.headers.get("authorization") not in ["Bearer " + t for t in outer.tokens]:
                    rep = problem(401, "unauthorized", "Missing or invalid token", "no valid token")
                else:
                    rep = outer.handler(req)
                self.send_response(rep.status)
                for k, v in rep.headers.items():
                    self.send_header(k, v)
                if rep.chunks is None:
                    self.send_header("Content-Length", str(len(rep.body)))
                self.end_headers()
                if rep.chunks is None:
                    self.wfile.write(rep.body)
                    return
                try:
                    for c in rep.chunks:
                        self.wfile.write(c)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass    # the client hung up mid-stream (a wait that timed out): what a stream expects

            do_GET = _serve
            do_POST = _serve

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self._httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
        return False
