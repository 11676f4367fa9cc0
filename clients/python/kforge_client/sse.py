"""kforge_client.sse -- a Server-Sent Events parser (the WHATWG HTML
standard's "event stream interpretation"), fed bytes as they arrive.

The parser owns its buffers and nothing else: feed() takes any split of the
stream (a CR at the end of one chunk and the LF opening the next are one
line end) and returns the events completed so far.  It keeps what a
reconnecting client needs: ``last_event_id`` (sent back as Last-Event-ID),
``retry_ms`` (the reconnection delay the server asked for) and
``comments`` (how many comment lines, the server's heartbeats, came).

Failure behaviour: the stream is untrusted.  A line or an event's data
longer than its limit raises StreamError (the caller drops the
connection); bytes that are not UTF-8 are replaced, as the standard says.
Comment lines (``: hb``) and unknown fields are ignored; an event not
ended by a blank line when the stream ends is dropped.
"""

import codecs
import re

__all__ = ["Event", "SSEParser", "StreamError"]

MAX_LINE = 4 * 1024 * 1024      # longest line, in characters
MAX_DATA = 16 * 1024 * 1024     # longest data of one event, in characters

_LINE_END = re.compile("\r\n|\r|\n")


class StreamError(ValueError):
    """The event stream broke a limit (a line or an event too long)."""


class Event:
    """One dispatched event: ``event`` (type, "message" when the server
    named none), ``data`` (the data lines joined by "\\n"), ``id`` (the
    last event id in force when it was dispatched, "" for none)."""

    __slots__ = ("event", "data", "id")

    def __init__(self, event, data, id):
        self.event = event
        self.data = data
        self.id = id

    def __eq__(self, other):
        return isinstance(other, Event) and (self.event, self.data, self.id) == (other.event, other.data, other.id)

    def __repr__(self):
        return "Event(event=%r, data=%r, id=%r)" % (self.event, self.data, self.id)


class SSEParser:
    """Incremental parser; see the module's comment."""

    def __init__(self, last_event_id="", max_line=MAX_LINE, max_data=MAX_DATA):
        """last_event_id: the id in force from an earlier connection of the
        same stream (it stays until an event sets another)."""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._max_line = max_line
        self._max_data = max_data
        self._line = []            # pieces of the current, unfinished line
        self._line_len = 0
        self._after_cr = False     # the last character seen was a CR
        self._first = True         # nothing decoded yet: a BOM is dropped
        self._data = []
        self._data_len = 0
        self._type = ""
        self._id_buf = last_event_id
        self.last_event_id = last_event_id
        self.retry_ms = None
        self.comments = 0          # comment lines seen (a server's heartbeats)

    def feed(self, chunk):
        """Parse the bytes of chunk; returns the list of events completed."""
        text = self._decoder.decode(chunk)
        if self._first and text:
            self._first = False
            if text[0] == "\ufeff":
                text = text[1:]
        events = []
        if self._after_cr and text:
            if text[0] == "\n":
                text = text[1:]     # the LF of a CRLF split between two chunks
            self._after_cr = False
        start = 0
        for m in _LINE_END.finditer(text):
            self._append(text[start:m.start()])
            self._end_line(events)
            start = m.end()
            self._after_cr = m.group() == "\r" and start == len(text)
        self._append(text[start:])
        return events

    def _append(self, piece):
        if not piece:
            return
        self._line_len += len(piece)
        if self._line_len > self._max_line:
            raise StreamError("an event stream line is longer than %d characters" % self._max_line)
        self._line.append(piece)

    def _end_line(self, events):
        line = "".join(self._line)
        self._line = []
        self._line_len = 0
        if line == "":
            self._dispatch(events)
            return
        if line[0] == ":":
            self.comments += 1
            return
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._type = value
        elif field == "data":
            self._data_len += len(value) + 1
            if self._data_len > self._max_data:
                raise StreamError("an event's data is longer than %d characters" % self._max_data)
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self._id_buf = value
        elif field == "retry":
            if value and all("0" <= ch <= "9" for ch in value):
                self.retry_ms = int(value)

    def _dispatch(self, events):
        self.last_event_id = self._id_buf
        if not self._data:
            self._type = ""
            return
        events.append(Event(self._type or "message", "\n".join(self._data), self.last_event_id))
        self._data = []
        self._data_len = 0
        self._type = ""
