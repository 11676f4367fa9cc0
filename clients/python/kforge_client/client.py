"""kforge_client.client -- Client, the notebook's handle on kforge-api, and
Job, one job's document.

The routes and shapes are those of docs/runs.md and the README's HTTP API
(POST/GET /v1/jobs, /v1/jobs/{id}/stream, /iterations, /artifacts,
/v1/artifacts/{sha256}, /v1/compare, /v1/library) and of docs/batches.md
(/v1/batches, /v1/batches/{id}, /cancel, /report, /stream).  A Client
holds a URL and a token and no connection between calls; it may be shared
by threads.  Every call returns new objects the caller owns.

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
    labels, result, provenance, best, attempt, last_error, waiting,
    warnings); ``job["x"]`` and ``job.get("x")`` read any other field.
    ``waiting`` (``get``) is why a queued job waits, or None; ``warnings``
    (``submit``) what the service said on accepting it, e.g. that no worker
    has ever offered its target and backend."""

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
    waiting = property(lambda self: self.data.get("waiting"))
    warnings = property(lambda self: self.data.get("warnings") or [])

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
            cursor = _next_cursor(path, page, seen)
            if cursor is None:
                return

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

    def transcript(self, job, attempt=None):
        """The LLM planner's model turns of a planner "llm" job (attempt:
        default the latest that has any), in order: a list of dicts, one per
        turn (the messages it added and the raw reply, the API key
        overwritten).  Written one JSON object per line to a file, they are
        what `kforge tune --llm-replay FILE` replays (docs/llm.md, Jobs).
        [] when the job ran no model."""
        query = [("attempt", _positive("attempt", attempt))] if attempt is not None else None
        _, _, payload = self._t.open("GET", "/v1/jobs/%s/transcript" % _job_id(job), query, retry=True)
        turns = []
        for line in payload.decode("utf-8").splitlines():
            if line.strip():
                try:
                    turns.append(json.loads(line))
                except (ValueError, RecursionError):
                    raise errors.KforgeError(title="Bad response",
                                             detail="a transcript line is not JSON") from None
        return turns

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

    # ---- batches ---------------------------------------------------------------

    def submit_batch(self, template=None, matrix=None, *, library=None, targets=None, dtypes=None, name=None,
                     priority=None, backend=None, budget=None, goal=None, labels=None, max_attempts=None,
                     idempotency_key=None):
        """Create a batch and all its jobs (docs/batches.md); returns the
        batch's document (a dict: id, name, source, priority, n_jobs,
        matrix_hash, state, counts, progress, ...).

        Either a template times a matrix: template is a submit() body as a
        dict ({"kind": "generate", "budget": ..., "labels": ...}, without
        the fields the matrix varies and without priority) and matrix a
        dict of one to four axes (op, shapes, dtype, target), each a list;
        every combination is one job.  Or the library form: library="all"
        or a list of library ops, each run at its declared shapes as a
        generate job, over targets (a list, required) and dtypes (default
        ["bfloat16"]), with backend, budget, goal, labels and max_attempts
        applied to every job.  name: 1..128 characters; priority: 0..4
        (default 2, below interactive jobs).  idempotency_key: as for
        submit(): a repeat of the same call returns the first batch instead
        of making another, and the call is retried on 503/429.
        """
        if library is None:
            if not isinstance(template, dict) or not isinstance(matrix, dict):
                raise ValueError("a batch is a template (a dict) times a matrix (a dict of op, shapes, dtype, "
                                 "target lists), or library=\"all\" (or a list of ops) with targets=[...]")
            per_job = [n for n, v in (("targets", targets), ("dtypes", dtypes), ("backend", backend),
                                      ("budget", budget), ("goal", goal), ("labels", labels),
                                      ("max_attempts", max_attempts)) if v is not None]
            if per_job:
                raise ValueError("%s: the library form's; a matrix batch takes them in its template "
                                 "(targets and dtypes as matrix axes)" % ", ".join(per_job))
            body = {"template": template, "matrix": matrix}
        else:
            if template is not None or matrix is not None:
                raise ValueError("give a template and a matrix, or library=, not both")
            if isinstance(library, (list, tuple)):
                library = list(library)
            elif library != "all":
                raise ValueError("library is \"all\" or a list of library ops, not %r" % (library,))
            body = {"library": library, "targets": _names("targets", targets, required=True)}
            for field, value in (("dtypes", _names("dtypes", dtypes)), ("backend", backend), ("budget", budget),
                                 ("goal", goal), ("labels", labels), ("max_attempts", max_attempts)):
                if value is not None:
                    body[field] = value
        for field, value in (("name", name), ("priority", priority)):
            if value is not None:
                body[field] = value
        return self._t.json("POST", "/v1/batches", body=body, headers=_idempotency(idempotency_key),
                            retry=idempotency_key is not None)

    def batch(self, batch, limit=1000):
        """The batch's roll-up (state, counts, finished, progress,
        started_at, finished_at, ...) with every entry in matrix order, all
        pages (limit: entries per page, 1..1000): dicts of job_id, seq,
        key, op, shape, dtype, target, state, attempt, last_error, best.
        The roll-up's fields are those of the last page read."""
        path = "/v1/batches/" + _batch_id(batch)
        query = [("limit", _positive("limit", limit))]
        entries = []
        cursor = None
        seen = set()
        while True:
            page = self._t.json("GET", path, query + [("cursor", cursor)], retry=True)
            if not isinstance(page, dict) or not isinstance(page.get("entries"), list):
                raise errors.KforgeError(title="Bad response", detail="GET %s: a roll-up without entries" % path)
            entries.extend(page["entries"])
            cursor = _next_cursor(path, page, seen)
            if cursor is None:
                page["entries"] = entries
                return page

    def batches(self, limit=None):
        """An iterator over the token's batches (an admin's: every batch),
        newest first, each a dict with its counts and progress but no
        entries, following next_cursor page after page; limit: the page
        size (1..200)."""
        query = [("limit", _positive("limit", limit))] if limit is not None else []
        return self._pages("/v1/batches", query)

    def cancel_batch(self, batch, reason=None, idempotency_key=None):
        """Cancel every job of the batch that has not finished (queued and
        retrying ones at once, running ones between iterations); returns
        the roll-up plus "cancelled" and "cancel_requested", the jobs this
        call moved.  Calling it again moves nothing more, so it is retried
        on 503/429 and lost connections (a retry after a lost answer may
        report 0 and 0; with an idempotency_key it replays the first
        answer).  reason: up to 512 characters, kept in each job's event."""
        body = None
        if reason is not None:
            if not isinstance(reason, str):
                raise ValueError("reason must be a string")
            body = {"reason": reason}
        return self._t.json("POST", "/v1/batches/%s/cancel" % _batch_id(batch), body=body,
                            headers=_idempotency(idempotency_key), retry=True)

    def batch_report(self, batch, baseline=None, threshold=None, format="json"):
        """What changed since a baseline batch, entry by entry (matched by
        op|shape|dtype|target): old and new latency, ratio, verdict
        (improved, regressed, unchanged, failed, new, missing, pending) and
        the provenance that differs.  format "json": a dict (batch,
        baseline, threshold, summary, entries); "md": Markdown text; "csv":
        CSV text (RFC 4180, CRLF line ends).  baseline: a batch (default:
        the newest earlier finished batch of yours over the same matrix);
        threshold: 0 <= t < 1 (default 0.03: ratios within 1 +- 3% are
        unchanged)."""
        path = "/v1/batches/%s/report" % _batch_id(batch)
        if format not in _REPORT_TYPES:
            raise ValueError("format is json, md or csv, not %r" % (format,))
        query = []
        if baseline is not None:
            query.append(("baseline", _batch_id(baseline)))
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < 1:
                raise ValueError("threshold must be a number from 0 up to (not including) 1, e.g. 0.03")
            query.append(("threshold", repr(float(threshold))))
        if format == "json":
            return self._t.json("GET", path, query, retry=True)
        query.append(("format", format))
        _, _, data = self._t.open("GET", path, query, headers={"Accept": _REPORT_TYPES[format]}, retry=True)
        return data.decode("utf-8")

    def wait_batch(self, batch, on_batch=None, on_state=None, on_iteration=None, timeout=None):
        """Follow the batch's event stream until it ends (every job
        finished); returns the final roll-up (batch()).

        on_batch(event): each roll-up ({"batch_id", "n_jobs", "counts",
        "progress"}), once when the stream opens and after each round of
        state changes; on_state(event), on_iteration(event): the batch's
        jobs' events (each with its job_id), as wait() gives them.  A
        dropped stream is reopened with Last-Event-ID, so no job event is
        missed or repeated.  timeout: seconds (None: no limit);
        WaitTimeout when it passes (the batch goes on).  An exception
        raised by a callback ends the wait and propagates."""
        bid = _batch_id(batch)
        self._follow("/v1/batches/%s/stream" % bid, "batch " + bid,
                     {"batch": on_batch, "state": on_state, "iteration": on_iteration}, timeout)
        return self.batch(bid)


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



_REPORT_TYPES = {"json": "application/json", "md": "text/markdown", "csv": "text/csv"}


def _batch_id(batch):
    """The UUID of a batch's document (a dict with its id) or of an id
    string; ValueError otherwise."""
    bid = batch.get("id") if isinstance(batch, dict) else batch
    if not isinstance(bid, str):
        raise ValueError("a batch is its document (a dict) or its id (a UUID string), not %s" % type(bid).__name__)
    try:
        return str(uuid.UUID(bid))
    except ValueError:
        raise ValueError("%r is not a batch id (a UUID; Client.batches() lists them)" % bid) from None


def _names(field, values, required=False):
    """A list of strings (targets, dtypes) as a list; None stays None
    unless required."""
    if values is None and not required:
        return None
    if isinstance(values, str) or not isinstance(values, (list, tuple)) or not values:
        raise ValueError("%s must be a non-empty list, e.g. [\"trn2\", \"trn3\"]" % field)
    return list(values)


def _next_cursor(path, page, seen):
    """The page's next_cursor (None on the last page), refusing one that
    repeats (a loop) or is not a string."""
    cursor = page.get("next_cursor")
    if cursor is None:
        return None
    if not isinstance(cursor, str) or cursor in seen:
        raise errors.KforgeError(title="Bad response", detail="GET %s: next_cursor repeats or is not a string" % path)
    seen.add(cursor)
    return cursor
