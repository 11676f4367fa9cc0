"""problem+json answers to typed exceptions."""

import email.utils
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kforge_client as kc  # noqa: E402
from kforge_client import errors  # noqa: E402


def problem(status, slug="x", **more):
    import json

    doc = {"type": "urn:kforge:problem:" + slug, "title": "T%d" % status, "status": status,
           "detail": "what to do", "instance": "/v1/jobs", "request_id": "rid1"}
    doc.update(more)
    return json.dumps(doc).encode()


class ErrorMappingTest(unittest.TestCase):
    def test_each_status_has_its_class(self):
        for status, cls in ((401, kc.Unauthorized), (403, kc.Forbidden), (404, kc.NotFound), (409, kc.Conflict),
                            (422, kc.Unprocessable), (429, kc.RateLimited), (503, kc.Unavailable)):
            e = errors.from_response(status, "r", problem(status))
            self.assertIs(type(e), cls, status)
            self.assertIsInstance(e, kc.KforgeError)
        for status in (400, 405, 413, 415, 500):
            self.assertIs(type(errors.from_response(status, "r", problem(status))), kc.KforgeError)

    def test_fields_of_the_problem_are_kept(self):
        fields = [{"field": "priority", "rule": "range", "detail": "must be between 0 and 9"}]
        e = errors.from_response(422, "Unprocessable Entity", problem(422, "validation", errors=fields), "3")
        self.assertEqual((e.type, e.title, e.status, e.detail), ("urn:kforge:problem:validation", "T422", 422,
                                                                 "what to do"))
        self.assertEqual(e.errors, fields)
        self.assertEqual(e.retry_after, 3)
        self.assertEqual((e.instance, e.request_id), ("/v1/jobs", "rid1"))
        self.assertIn("what to do", str(e))
        self.assertIn("rid1", str(e))

    def test_a_body_that_is_not_a_problem(self):
        e = errors.from_response(502, "Bad Gateway", b"<html>\n<b>upstream</b>   down</html>", None, "GET",
                                 "/v1/jobs")
        self.assertIs(type(e), kc.KforgeError)
        self.assertEqual((e.status, e.title), (502, "Bad Gateway"))
        self.assertIn("GET /v1/jobs answered 502: <html> <b>upstream</b> down</html>", e.detail)
        self.assertIn("no problem document", errors.from_response(503, "Service Unavailable", b"").detail)
        self.assertIs(type(errors.from_response(404, "Not Found", b'["not", "a", "problem"]')), kc.NotFound)

    def test_retry_after_as_seconds_or_date(self):
        self.assertEqual(errors.parse_retry_after("7"), 7)
        self.assertIsNone(errors.parse_retry_after(None))
        self.assertIsNone(errors.parse_retry_after("soon"))
        later = email.utils.formatdate(time.time() + 30, usegmt=True)
        self.assertTrue(25 <= errors.parse_retry_after(later) <= 31)
        self.assertEqual(errors.parse_retry_after(email.utils.formatdate(0, usegmt=True)), 0)

    def test_wait_timeout_is_both_kinds(self):
        e = kc.WaitTimeout(title="Wait timed out", detail="d")
        self.assertIsInstance(e, TimeoutError)
        self.assertIsInstance(e, kc.KforgeError)
        self.assertIsNone(e.status)
        self.assertEqual(str(e), "Wait timed out: d")


if __name__ == "__main__":
    unittest.main()
