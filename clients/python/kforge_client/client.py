"""kforge_client.client -- Client, the notebook's handle on kforge-api, and
Job, one job's document.

The routes and shapes are those of docs/runs.md and the README's HTTP API
(POST/GET /v1/jobs, /v1/jobs/{id}/stream, /iterations, /artifacts,
/v1/artifacts/{sha256}, /v1/compare, /v1/library).  A Client holds a URL and a token and
no connection between calls; it may be shared by threads.  Every call
returns new objects the caller owns.

Failure behaviour: the service's errors are raised as the typed
KforgeError subclasses of kforge_client.errors; arguments that could never
make a valid request (an id that is not a UUID, three ids where compare
takes 2..4) raise ValueError before anything is sent.  Reads are retried
on 503/429 and lost connections (see _http); a submission only when it has
an idempotency key.  An artifact whose bytes do not match its SHA-256 or
its size is never returned.
"""

import datetime
import hashlib
import http.client
import json
import os
import re
import time
import uuid

from . import errors
from ._http import Transport
from .sse import SSEParser, StreamError
from .tables import IterationList

__all__ = ["Client", "Job", "FINAL_STATES"]

FINAL_STATES = frozenset(["succeeded", "failed", "cancelled", "dead"])
_SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
_LABEL_KEY = re.compile(r"\A[A-Za-z0-9_.-]{1,64}\Z")
_IDEM_KEY = re.compile(r"\A[\x20-\x7e]{1,253}\Z")
_RECONNECT_S = 1.0        # the stream's reconnection delay until the server sets `retry:`
_STREAM_READ_S = 45.0     # a stream silent this long is dead (the server's heartbeat is every 15 s)
_MAX_ARTIFACT_BYTES = 1 << 31


class Job:
    """One job as the service last described it.  The document is in
    ``data``; the common fields are attributes (id, kind, state, target,
    labels, result, provenance, best, attempt, last_error); ``job["x"]`` and
    ``job.get("x")`` read any other field."""

    def __init__(self, data):
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise errors.KforgeError(title="Bad response", detail="a job document without an id")
        self.data = data

    def __getitem__(self, key):
        return self.data[key]

    def get(self, key, default=None):
        return self.data.get(key, default)

    id = property(lambda self: self.data["id"])
    kind = property(lambda self: self.data.get("kind"))
    state = property(lambda self: self.data.get("state"))
    target = property(lambda self: self.data.get("target"))
    labels = property(lambda self: self.data.get("labels") or {})
    result = property(lambda self: self.data.get("result"))
    provenance = property(lambda self: self.data.get("provenance") or {})
    best = property(lambda self: self.data.get("best"))
    attempt = property(lambda self: self.data.get("attempt"))
    last_error = property(lambda self: self.data.get("last_error"))

    @property
    def done(self):
        """True once the job is in a final state."""
        return self.state in FINAL_STATES

    def __repr__(self):
        return "<Job %s %s %s>" % (self.id, self.kind, self.state)


def _job_id(job):
    """The UUID of a Job or of an id string; ValueError otherwise."""
    jid = job.id if isinstance(job, Job) else job
    if not isinstance(jid, str):
        raise ValueError("a job is a Job or its id (a UUID string), not %s" % type(jid).__name__)
    try:
        return str(uuid.UUID(jid))
    except ValueError:
        raise ValueError("%r is not a job id (a UUID such as 5bd35d24-9b1c-4f0e-8d6a-0c2f1e3a4b5c)" % jid) from None


def _rfc3339(value):
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ValueError("created_after/created_before: give a timezone-aware datetime "
                             "(datetime.timezone.utc), or an RFC 3339 string")
        return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value


def _idempotency(key):
    """The Idempotency-Key header (a quoted sf-string) of key, {} for None."""
    if key is None:
        return {}
    if not isinstance(key, str) or not _IDEM_KEY.match(key):
        raise ValueError("idempotency_key must be 1..253 printable ASCII characters")
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    if len(escaped) > 253:
        raise ValueError("idempotency_key is too long once its quotes and backslashes are escaped")
    return {"Idempotency-Key": '"%s"' % escaped}


class Client:
    """A kforge-api client.

    url, token: the service and a Bearer token (default: the KFORGE_URL and
    KFORGE_TOKEN environment variables).  timeout: seconds for connecting
    and for each read.  retries, backoff: how many times, and from which
    first wait (seconds, doubling), a retryable call is repeated.
    """

    def __init__(self, url=None, token=None, timeout=30.0, retries=4, backoff=0.5):
        url = url or os.environ.get("KFORGE_URL")
        token = token or os.environ.get("KFORGE_TOKEN")
        if not url:
            raise ValueError("no kforge URL: pass Client(url, token) or set KFORGE_URL "
                             "(`make run` serves http://127.0.0.1:8080)")
        if not token:
            raise ValueError("no token: pass Client(url, token) or set KFORGE_TOKEN "
                             "(`kforge-api token create --role user --name NAME` prints one)")
        self._t = Transport(url, token, timeout, retries, backoff)

    @property
    def url(self):
        return self._t.url

    def __repr__(self):
        return "Client(url=%r, token=<hidden>)" % self._t.url

    # ---- jobs ------------------------------------------------------------

    def submit(self, kind, *, target, backend=None, priority=None, max_attempts=None, budget=None, goal=None,
               labels=None, spec=None, idempotency_key=None, **fields):
        """Submit a job; returns it as queued (a Job).

        kind: generate, optimize, profile, validate, diag or auto; target:
        trn1, inf2, trn2 or trn3.  The kind's own fields (op, shapes,
        dtype; source, entry, reference, inputs, tunables; ...) are given
        as keyword arguments or as one ``spec`` dict, not both for the same
        field.  idempotency_key: any 1..253 printable ASCII characters;
        with one, a repeat of the same call (a notebook cell run again, or
        this client's retry after a lost answer) returns the first job
        instead of making another, and the call is retried on 503/429.
        """
        spec = dict(spec or {})
        both = sorted(set(spec) & set(fields))
        if both:
            raise ValueError("%s given both in spec and as keyword arguments" % ", ".join(both))
        spec.update(fields)
        body = {"kind": kind, "target": target}
        for name, value in (("backend", backend), ("priority", priority), ("max_attempts", max_attempts),
                            ("budget", budget), ("goal", goal), ("labels", labels)):
            if value is not None:
                body[name] = value
        if spec:
            body["spec"] = spec
        doc = self._t.json("POST", "/v1/jobs", body=body, headers=_idempotency(idempotency_key),
                           retry=idempotency_key is not None)
        return Job(doc)

    def get(self, job):
        """The job's full document (result, provenance and all)."""
        return Job(self._t.json("GET", "/v1/jobs/" + _job_id(job), retry=True))

    def jobs(self, labels=None, limit=None, **filters):
        """An iterator over the token's jobs, newest first, in the light
        shape, following next_cursor page after page (each page is asked
        for when the iteration reaches it).

        filters: state, kind, target, op, batch, worker, created_after,
        created_before (RFC 3339 strings or aware datetimes), view
        ("full" for the whole document); labels: a dict, each entry a
        ``label.KEY=VALUE`` filter; limit: the page size.
        """
        query = [(k, _rfc3339(v)) for k, v in sorted(filters.items())]
        for key, value in sorted((labels or {}).items()):
            if not isinstance(key, str) or not _LABEL_KEY.match(key):
                raise ValueError("label key %r: 1..64 of letters, digits, _ . -" % (key,))
            query.append(("label." + key, value))
        if limit is not None:
            query.append(("limit", limit))
        return (Job(item) for item in self._pages("/v1/jobs", query, "jobs"))

    def _pages(self, path, query, legacy_key=None):
        """The items of every page of a paged route.  legacy_key: the list's
        name on a route that answered it under another name than items
        before docs/runs.md (GET /v1/jobs answered "jobs")."""
        cursor = None
        seen = set()
        while True:
            page = self._t.json("GET", path, list(query) + [("cursor", cursor)], retry=True)
            if not isinstance(page, dict):
                raise errors.KforgeError(title="Bad response", detail="GET %s: a page is not an object" % path)
            items = page.get("items")
            if items is None and legacy_key:
                items = page.get(legacy_key)
            if not isinstance(items, list):
                raise errors.KforgeError(title="Bad response", detail="GET %s: a page without items" % path)
            for item in items:
                yield item
            cursor = page.get("next_cursor")
            if cursor is None:
                return
            if not isinstance(cursor, str) or cursor in seen:
                raise errors.KforgeError(title="Bad response",
                                         detail="GET %s: next_cursor repeats or is not a string" % path)
            seen.add(cursor)

    # ---- live progress ---------------------------------------------------

    def wait(self, job, on_iteration=None, on_state=None, timeout=None):
        """Follow the job's event stream until it ends; returns the final
        Job (from GET /v1/jobs/{id}).

        on_iteration(event), on_state(event): called with each event's data
        (a dict, docs/runs.md) as it arrives; a job that already ended
        replays its history first.  A dropped stream is reopened with
        Last-Event-ID, so no event is missed or repeated.  timeout: seconds
        (None: no limit); WaitTimeout when it passes (the job goes on).
        An exception raised by a callback ends the wait and propagates.
        """
        jid = _job_id(job)
        self._follow("/v1/jobs/%s/stream" % jid, "job " + jid, {"state": on_state, "iteration": on_iteration},
                     timeout)
        return self.get(jid)

    def _follow(self, path, what, callbacks, timeout):
        """Read the event stream at path until its `end` event, reopening it
        with Last-Event-ID when it drops.  callbacks: event type -> a
        function of the event's data (a dict) or None; events of another
        type are skipped (after `end`, none is).  what names the stream in
        errors ("job ID", "batch ID")."""
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        last_id = ""
        delay = _RECONNECT_S
        quiet = 0    # connections in a row that ended with neither an event nor a heartbeat
        while True:
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
            if last_id:
                headers["Last-Event-ID"] = last_id
            # a read waits at most this long: past the deadline, or past a
            # stream silent for longer than its heartbeat, it times out and
            # the stream is opened again (or the wait ends)
            read_s = _STREAM_READ_S if deadline is None else max(0.05, min(_STREAM_READ_S, deadline - time.monotonic()))
            _, _, (conn, resp) = self._t.open("GET", path, headers=headers, retry=True, timeout=read_s, stream=True)
            parser = SSEParser(last_event_id=last_id)
            got = 0
            ended = False
            try:
                while not ended:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise errors.WaitTimeout(title="Wait timed out",
                                                 detail="%s did not end within %g s" % (what, timeout))
                    try:
                        chunk = resp.read1(65536)
                    except (OSError, ValueError, http.client.HTTPException):
                        break     # a dropped or silent stream: reconnect below
                    if not chunk:
                        break
                    for ev in parser.feed(chunk):
                        got += 1
                        ended = self._dispatch(what, ev, callbacks)
                        if ended:
                            break
                    last_id = parser.last_event_id
            except StreamError as exc:
                raise errors.KforgeError(title="Bad event stream", detail="%s: %s" % (what, exc)) from None
            finally:
                conn.close()
            if ended:
                return
            if parser.retry_ms is not None:
                delay = parser.retry_ms / 1000.0
            quiet = 0 if got or parser.comments else quiet + 1
            if quiet > self._t.retries:
                raise errors.Unavailable(title="Stream closed",
                                         detail="the event stream of %s closed %d times in a row without an "
                                         "event or a heartbeat; check kforge-api's log" % (what, quiet))
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise errors.WaitTimeout(title="Wait timed out",
                                         detail="%s did not end within %g s" % (what, timeout))
            time.sleep(delay)

    @staticmethod
    def _dispatch(what, ev, callbacks):
        """One stream event to its callback; True for `end`."""
        if ev.event != "end" and ev.event not in callbacks:
            return False
        try:
            data = json.loads(ev.data)
        except (ValueError, RecursionError):
            raise errors.KforgeError(title="Bad event stream",
                                     detail="%s: a %s event whose data is not JSON" % (what, ev.event)) from None
        if not isinstance(data, dict):
            raise errors.KforgeError(title="Bad event stream",
                                     detail="%s: a %s event whose data is not an object" % (what, ev.event))
        if ev.event == "end":
            return True
        callback = callbacks[ev.event]
        if callback is not None:
            callback(data)
        return False

    # ---- iterations and comparison -----------------------------------------

    def iterations(self, job, attempt=None, limit=500):
        """Every iteration of the job (all pages), in (attempt, seq) order;
        attempt narrows to one attempt.  An IterationList: .rows() gives a
        flat table, .to_dataframe() a pandas DataFrame."""
        query = [("limit", limit)]
        if attempt is not None:
            query.append(("attempt", _positive("attempt", attempt)))
        return IterationList(self._pages("/v1/jobs/%s/iterations" % _job_id(job), query))

    def iteration(self, job, seq, attempt=None):
        """One iteration with all of its row: compile, the full profile,
        timings, source and source_diff (attempt: default the latest that
        has that seq)."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ValueError("seq must be a whole number >= 0")
        query = [("attempt", _positive("attempt", attempt))] if attempt is not None else None
        return self._t.json("GET", "/v1/jobs/%s/iterations/%d" % (_job_id(job), seq), query, retry=True)

    def compare(self, a, b, *more):
        """Two to four jobs side by side (docs/runs.md, Compare): best
        latency and fraction of bound, the params that differ, profile
        deltas, findings only one has, provenance that differs, the diff of
        the best sources and each run's best-so-far curve."""
        ids = [_job_id(j) for j in (a, b) + more]
        if len(ids) > 4:
            raise ValueError("compare takes 2 to 4 jobs, not %d" % len(ids))
        return self._t.json("GET", "/v1/compare", [("jobs", ",".join(ids))], retry=True)

    # ---- artifacts -----------------------------------------------------------

    def artifacts(self, job):
        """The job's artifacts: dicts of name, sha256, size, content_type,
        attempt, seq, final (True for the set of the job's result)."""
        return list(self._pages("/v1/jobs/%s/artifacts" % _job_id(job), []))

    def artifact(self, job, name):
        """The bytes of the artifact called name (kernel.py, profile.json,
        instructions.json, trace.json, ...) in the job's final set, checked
        against its SHA-256 and size.  NotFound when the final set has no
        such name (the message lists the names it has)."""
        return self._download(_job_id(job), self._final(job, name))

    def best_kernel(self, job):
        """The source of the job's best kernel: the final set's kernel.py,
        or, for a job finished before artifacts were kept, the source in
        its result (result.best.source)."""
        jid = _job_id(job)
        items = self.artifacts(jid)
        if any(it.get("final") is True and it.get("name") == "kernel.py" for it in items):
            return self._download(jid, self._final(jid, "kernel.py", items)).decode("utf-8")
        best = (self.get(jid).result or {}).get("best")
        if isinstance(best, dict) and isinstance(best.get("source"), str) and best["source"]:
            return best["source"]
        raise errors.NotFound(title="Not found", status=404,
                              detail="job %s has no best kernel: no final kernel.py artifact and no "
                              "result.best.source (is it finished and correct? Client.get(job).state)" % jid)

    def _final(self, job, name, items=None):
        jid = _job_id(job)
        if items is None:
            items = self.artifacts(jid)
        finals = [it for it in items if isinstance(it, dict) and it.get("final") is True]
        mine = [it for it in finals if it.get("name") == name]
        if not mine:
            have = sorted(set(str(it.get("name")) for it in finals))
            raise errors.NotFound(title="Not found", status=404,
                                  detail="job %s has no final artifact %r; its final set holds: %s"
                                  % (jid, name, ", ".join(have) if have else "nothing (not finished, or failed)"))
        return max(mine, key=lambda it: (_int(it.get("attempt")), _int(it.get("seq"))))

    def _download(self, jid, item):
        sha = item.get("sha256")
        size = item.get("size")
        if not isinstance(sha, str) or not _SHA256.match(sha):
            raise errors.KforgeError(title="Bad response", detail="job %s: an artifact without a SHA-256" % jid)
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= _MAX_ARTIFACT_BYTES:
            raise errors.KforgeError(title="Bad response", detail="artifact %s: no valid size" % sha)
        _, _, data = self._t.open("GET", "/v1/artifacts/" + sha, headers={"Accept": "*/*"}, retry=True,
                                  max_bytes=size)
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
            raise errors.KforgeError(title="Corrupt artifact",
                                     detail="artifact %s (%s) arrived as %d bytes whose SHA-256 does not match; "
                                     "try again, and report it if it persists" % (sha, item.get("name"), len(data)))
        return data


    # ---- the kernel library ---------------------------------------------------

    def library(self, limit=None, **filters):
        """The kernel library's entries this token reads (docs/library.md),
        in id order, every page: dicts of id, op, shape, dtype, target,
        backend, shared, entry, params, latency_ns, fraction_of_bound,
        source_sha256, job_id, attempt, iteration, provenance, ...

        filters: op (a library op, or "user.NAME"), target, dtype, backend."""
        unknown = sorted(set(filters) - {"op", "target", "dtype", "backend"})
        if unknown:
            raise ValueError("unknown library filter(s): %s (op, target, dtype, backend)" % ", ".join(unknown))
        query = [(k, v) for k, v in sorted(filters.items()) if v is not None]
        if limit is not None:
            query.append(("limit", _positive("limit", limit)))
        return list(self._pages("/v1/library", query))

    def library_entry(self, entry):
        """One library entry with its "history" (every change, oldest first)."""
        return self._t.json("GET", "/v1/library/" + _entry_id(entry), retry=True)

    def library_kernel(self, entry):
        """The entry's kernel as text: a header comment naming the entry,
        params, latency and provenance, then the source (a .py to drop into
        a model)."""
        _, _, data = self._t.open("GET", "/v1/library/%s/kernel" % _entry_id(entry), headers={"Accept": "*/*"},
                                  retry=True, max_bytes=_MAX_ARTIFACT_BYTES)
        return data.decode("utf-8")


_ENTRY_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")


def _entry_id(entry):
    value = entry.get("id") if isinstance(entry, dict) else entry
    if not isinstance(value, str) or not _ENTRY_ID.match(value):
        raise ValueError("%r is not a library entry id (Client.library() lists them)" % (value,))
    return value


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("%s must be a whole number >= 1" % name)
    return value


def _int(value):
    return value if isinstance(value, int) else -1

