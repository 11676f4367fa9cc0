"""The SSE parser against the WHATWG event-stream rules."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kforge_client.sse import Event, SSEParser, StreamError  # noqa: E402


def parse(*chunks, **kw):
    p = SSEParser(**kw)
    out = []
    for c in chunks:
        out.extend(p.feed(c))
    return p, out


class SSEParserTest(unittest.TestCase):
    def test_fields_of_one_event(self):
        p, ev = parse(b'id: 7\nevent: state\ndata: {"to": "running"}\n\n')
        self.assertEqual(ev, [Event("state", '{"to": "running"}', "7")])
        self.assertEqual(p.last_event_id, "7")

    def test_multi_line_data_is_joined_by_newlines(self):
        _, ev = parse(b"data: first\ndata:second\ndata:  third\n\n")
        self.assertEqual(ev[0].data, "first\nsecond\n third")
        self.assertEqual(ev[0].event, "message")

    def test_comments_and_unknown_fields_are_ignored(self):
        p, ev = parse(b": hb\n:\nfoo: bar\ndata: x\n: between\n\n: hb\n\n")
        self.assertEqual(ev, [Event("message", "x", "")])
        self.assertEqual(p.comments, 4)

    def test_every_line_ending_and_splits_between_chunks(self):
        text = b"event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\rdata: 3\n\n"
        whole = parse(text)[1]
        self.assertEqual([(e.event, e.data) for e in whole], [("a", "1"), ("b", "2"), ("message", "3")])
        for cut in range(1, len(text)):
            self.assertEqual(parse(text[:cut], text[cut:])[1], whole, "split at %d" % cut)
        self.assertEqual(parse(*[text[i:i + 1] for i in range(len(text))])[1], whole)

    def test_utf8_split_inside_a_character_and_a_leading_bom(self):
        raw = "\ufeffdata: d\u00e9j\u00e0 \U0001f600\n\n".encode("utf-8")
        for cut in range(1, len(raw)):
            self.assertEqual(parse(raw[:cut], raw[cut:])[1], [Event("message", "d\u00e9j\u00e0 \U0001f600", "")])
        self.assertEqual(parse(b"data: \xff\n\n")[1][0].data, "\ufffd")

    def test_event_without_data_is_not_dispatched_but_its_id_counts(self):
        p, ev = parse(b"id: 42\nevent: state\n\ndata: y\n\n")
        self.assertEqual(ev, [Event("message", "y", "42")])
        self.assertEqual(p.last_event_id, "42")

    def test_empty_data_field_dispatches_an_empty_event(self):
        self.assertEqual(parse(b"data\n\n")[1], [Event("message", "", "")])
        self.assertEqual(parse(b"data:\ndata:\n\n")[1][0].data, "\n")

    def test_id_persists_and_an_id_with_nul_is_ignored(self):
        p, ev = parse(b"id: 5\ndata: a\n\ndata: b\n\nid: 6\x00\ndata: c\n\nid\ndata: d\n\n")
        self.assertEqual([e.id for e in ev], ["5", "5", "5", ""])
        self.assertEqual(p.last_event_id, "")

    def test_last_event_id_carries_over_from_an_earlier_connection(self):
        p, ev = parse(b"data: a\n\n", last_event_id="17")
        self.assertEqual(ev[0].id, "17")
        self.assertEqual(p.last_event_id, "17")

    def test_retry_takes_digits_only(self):
        p, _ = parse(b"retry: 2500\n\n")
        self.assertEqual(p.retry_ms, 2500)
        p, _ = parse(b"retry: 2500\nretry: 3s\nretry: -1\nretry:\n\n")
        self.assertEqual(p.retry_ms, 2500)

    def test_an_unterminated_event_at_the_end_is_dropped(self):
        self.assertEqual(parse(b"data: a\n\ndata: b\n")[1], [Event("message", "a", "")])

    def test_field_without_space_and_colon_in_value(self):
        self.assertEqual(parse(b"data:a: b\n\n")[1][0].data, "a: b")

    def test_limits_refuse_a_line_or_an_event_too_long(self):
        with self.assertRaises(StreamError):
            parse(b"data: " + b"x" * 50, b"x" * 60, max_line=100)
        with self.assertRaises(StreamError):
            parse(b"data: 12345\n" * 30, max_data=100)
        self.assertEqual(len(parse(b"data: " + b"x" * 90 + b"\n\n", max_line=100)[1]), 1)


if __name__ == "__main__":
    unittest.main()
