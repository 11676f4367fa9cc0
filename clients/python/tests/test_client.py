"""Client against a scripted server: what it sends, how it pages, retries,
maps errors, follows the event stream and checks artifacts."""

import datetime
import hashlib
import json
import os
import sys
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kforge_client as kc  # noqa: E402
from fakeserver import TOKEN, FakeServer, Reply, json_reply, problem  # noqa: E402

A = "5bd35d24-9b1c-4f0e-8d6a-0c2f1e3a4b5c"
B = "0f6c1e2d-3a4b-4c5d-8e6f-7a8b9c0d1e2f"
C = "11111111-2222-4333-8444-555555555555"


def job_doc(jid=A, state="queued", **more):
    d = {"id": jid, "kind": "generate", "state": state, "target": "trn2", "labels": {}}
    d.update(more)
    return d


def client(srv, **kw):
    kw.setdefault("backoff", 0.001)
    return kc.Client(srv.url, TOKEN, **kw)


class ConstructionTest(unittest.TestCase):
    def test_url_and_token_from_the_environment(self):
        with mock.patch.dict(os.environ, {"KFORGE_URL": "http://127.0.0.1:9/base/", "KFORGE_TOKEN": TOKEN}):
            c = kc.Client()
        self.assertEqual(c.url, "http://127.0.0.1:9/base")
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaisesRegex(ValueError, "KFORGE_URL"):
                kc.Client()
            with self.assertRaisesRegex(ValueError, "KFORGE_TOKEN"):
                kc.Client("http://127.0.0.1:9")

    def test_bad_arguments(self):
        for url in ("ftp://h", "127.0.0.1:8080", "http://h/?q=1"):
            with self.assertRaises(ValueError):
                kc.Client(url, TOKEN)
        with self.assertRaises(ValueError) as cm:
            kc.Client("http://h", "kf_abc\r\nX-Evil: 1")
        self.assertNotIn("kf_abc", str(cm.exception))

    def test_the_token_is_never_shown(self):
        c = kc.Client("http://user@127.0.0.1:1", TOKEN, retries=0)
        self.assertNotIn(TOKEN, repr(c))
        self.assertNotIn("user@", repr(c))
        with self.assertRaises(kc.Unavailable) as cm:
            c.get(A)
        e = cm.exception
        self.assertIsNone(e.status)
        for text in (str(e), repr(e), e.detail):
            self.assertNotIn(TOKEN, text)
        self.assertIn("KFORGE_URL", e.detail)


class SubmitTest(unittest.TestCase):
    def test_body_and_idempotency_key(self):
        def h(req):
            return json_reply(202, job_doc(), {"Location": "/v1/jobs/" + A})

        with FakeServer(h) as srv:
            job = client(srv).submit("generate", target="trn2", backend="sim", budget={"iterations": 5},
                                     labels={"team": "infra"}, op="softmax", shapes=[[256, 1024]],
                                     dtype="bfloat16", idempotency_key='cell "7" \\ a')
        self.assertEqual((job.id, job.state, job.kind, job.done), (A, "queued", "generate", False))
        req = srv.requests[0]
        self.assertEqual((req.method, req.path), ("POST", "/v1/jobs"))
        self.assertEqual(req.headers["content-type"], "application/json")
        self.assertEqual(req.headers["idempotency-key"], '"cell \\"7\\" \\\\ a"')
        self.assertEqual(req.json(), {"kind": "generate", "target": "trn2", "backend": "sim",
                                      "budget": {"iterations": 5}, "labels": {"team": "infra"},
                                      "spec": {"op": "softmax", "shapes": [[256, 1024]], "dtype": "bfloat16"}})

    def test_warnings_and_the_waiting_reason(self):
        cap = {"target": "trn2", "backend": "neuron"}
        warn = {"code": "capability-never-offered", "capability": cap,
                "message": "no worker has ever offered backend 'neuron' for target 'trn2': ..."}
        waiting = {"reason": "no live worker offers backend 'neuron' for target 'trn2' (none ever has)",
                   "capability": cap, "ever_offered": False}

        def h(req):
            if req.method == "POST":
                return json_reply(202, dict(job_doc(), warnings=[warn]), {"Location": "/v1/jobs/" + A})
            return json_reply(200, dict(job_doc(), waiting=waiting))

        with FakeServer(h) as srv:
            c = client(srv)
            job = c.submit("generate", target="trn2", backend="neuron", op="add")
            self.assertEqual(job.warnings, [warn])
            self.assertIsNone(job.waiting)
            job = c.get(job)
            self.assertEqual(job.waiting, waiting)
            self.assertEqual(job.warnings, [])

    def test_refuses_what_could_never_be_sent(self):
        c = kc.Client("http://127.0.0.1:1", TOKEN)
        with self.assertRaisesRegex(ValueError, "op given both"):
            c.submit("generate", target="trn2", spec={"op": "a"}, op="b")
        for key in ("", "k\u00e9y", "x" * 254, "\n"):
            with self.assertRaises(ValueError):
                c.submit("diag", target="trn2", idempotency_key=key)
        with self.assertRaises(ValueError):
            c.submit("optimize", target="trn2", goal={"latency_ns": float("nan")})

    def test_a_keyed_submit_is_retried_an_unkeyed_one_is_not(self):
        answers = [problem(503, "unavailable", "Service unavailable", "db away", retry_after=2),
                   problem(409, "idempotency-key-in-use", "Conflict", "first still running", retry_after=1),
                   json_reply(202, job_doc())]

        with FakeServer(lambda req: answers.pop(0)) as srv, mock.patch("time.sleep") as sleep:
            self.assertEqual(client(srv).submit("diag", target="trn2", idempotency_key="k1").id, A)
        self.assertEqual(len(srv.requests), 3)
        self.assertEqual([c.args[0] for c in sleep.call_args_list], [2.0, 1.0])
        self.assertTrue(all(r.headers["idempotency-key"] == '"k1"' for r in srv.requests))

        with FakeServer(lambda req: problem(503, "unavailable", "Service unavailable", "db away", retry_after=1)) \
                as srv, mock.patch("time.sleep") as sleep:
            with self.assertRaises(kc.Unavailable) as cm:
                client(srv).submit("diag", target="trn2")
        self.assertEqual(len(srv.requests), 1)
        self.assertEqual(cm.exception.retry_after, 1)
        sleep.assert_not_called()

    def test_validation_errors_carry_their_fields(self):
        fields = [{"field": "priority", "rule": "range", "detail": "must be between 0 and 9"}]
        with FakeServer(lambda req: problem(422, "validation", "Unprocessable request", "priority: ...",
                                            errors=fields)) as srv:
            with self.assertRaises(kc.Unprocessable) as cm:
                client(srv).submit("diag", target="trn2", priority=12, idempotency_key="k")
        self.assertEqual(cm.exception.errors, fields)
        self.assertEqual(len(srv.requests), 1, "a 422 is not retried")


class ReadTest(unittest.TestCase):
    def test_get_and_the_permission_boundary(self):
        def h(req):
            if req.path == "/v1/jobs/" + A:
                return json_reply(200, job_doc(state="succeeded", result={"best": {"source": "s"}}))
            return problem(404, "not-found", "Not found", "no job %s" % req.path.rsplit("/", 1)[1])

        with FakeServer(h) as srv:
            c = client(srv)
            job = c.get(kc.Job(job_doc()))
            self.assertTrue(job.done)
            self.assertEqual(job["result"], {"best": {"source": "s"}})
            with self.assertRaises(kc.NotFound) as cm:
                c.get(B)
            self.assertEqual((cm.exception.status, cm.exception.type), (404, "urn:kforge:problem:not-found"))
            with self.assertRaises(kc.Unauthorized):
                kc.Client(srv.url, "kf_someone_else", retries=0).get(A)
            with self.assertRaises(ValueError):
                c.get("../v1/jobs")
        self.assertEqual(len(srv.requests), 3, "a 404 and a 401 are not retried")

    def test_reads_are_retried_then_give_up(self):
        with FakeServer(lambda req: problem(503, "unavailable", "Service unavailable", "db away")) as srv, \
                mock.patch("time.sleep") as sleep:
            with self.assertRaises(kc.Unavailable):
                client(srv, retries=3).get(A)
        self.assertEqual(len(srv.requests), 4)
        self.assertEqual(sleep.call_count, 3)
        waits = [c.args[0] for c in sleep.call_args_list]
        self.assertTrue(all(0 < w <= 0.001 * 2 ** i for i, w in enumerate(waits)), waits)

        answers = [problem(429, "rate-limited", "Too many", "slow down", retry_after=500), json_reply(200, job_doc())]
        with FakeServer(lambda req: answers.pop(0)) as srv, mock.patch("time.sleep") as sleep:
            self.assertEqual(client(srv).get(A).id, A)
        sleep.assert_called_once_with(120.0)

    def test_jobs_follow_the_cursor_and_send_the_filters(self):
        pages = {None: ({"items": [job_doc(A)], "next_cursor": "c1"}),
                 "c1": ({"items": [job_doc(B)], "next_cursor": "c2"}),
                 "c2": ({"items": [job_doc(C)], "next_cursor": None})}

        with FakeServer(lambda req: json_reply(200, pages[req.arg("cursor")])) as srv:
            after = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.timezone.utc)
            got = list(client(srv).jobs(op="softmax", state="succeeded", created_after=after,
                                        labels={"team": "infra", "run.id": "7"}, limit=1))
        self.assertEqual([j.id for j in got], [A, B, C])
        self.assertEqual([r.arg("cursor") for r in srv.requests], [None, "c1", "c2"])
        q = srv.requests[0].query
        self.assertIn(("label.team", "infra"), q)
        self.assertIn(("label.run.id", "7"), q)
        self.assertIn(("op", "softmax"), q)
        self.assertIn(("created_after", "2026-12-02T10:00:00.000000Z"), q)
        self.assertIn(("limit", "1"), q)

    def test_jobs_read_the_list_under_its_old_name_and_refuse_loops(self):
        with FakeServer(lambda req: json_reply(200, {"jobs": [job_doc()], "next_cursor": None})) as srv:
            self.assertEqual([j.id for j in client(srv).jobs()], [A])
        with FakeServer(lambda req: json_reply(200, {"items": [], "next_cursor": "same"})) as srv:
            with self.assertRaisesRegex(kc.KforgeError, "next_cursor repeats"):
                list(client(srv).jobs())
        c = kc.Client("http://127.0.0.1:1", TOKEN)
        with self.assertRaises(ValueError):
            c.jobs(labels={"bad key": "v"})
        with self.assertRaises(ValueError):
            c.jobs(created_before=datetime.datetime(2026, 1, 1))

    def test_transcript_is_one_turn_per_line(self):
        turns = [{"turn": 1, "iteration": 0, "mode": "repair", "reply": "{}"},
                 {"turn": 2, "iteration": 1, "mode": "repair", "reply": None, "error": "timeout"}]
        body = "".join(json.dumps(t) + "\n" for t in turns).encode("utf-8")
        with FakeServer(lambda req: Reply(200, body, {"Content-Type": "application/x-ndjson"})) as srv:
            got = client(srv).transcript(A, attempt=2)
        self.assertEqual(got, turns)
        self.assertEqual(srv.requests[0].path, "/v1/jobs/%s/transcript" % A)
        self.assertEqual(srv.requests[0].arg("attempt"), "2")
        with FakeServer(lambda req: Reply(200, b"", {"Content-Type": "application/x-ndjson"})) as srv:
            self.assertEqual(client(srv).transcript(A), [])
        with FakeServer(lambda req: Reply(200, b"{not json\n", {"Content-Type": "application/x-ndjson"})) as srv:
            with self.assertRaisesRegex(kc.KforgeError, "Bad response"):
                client(srv).transcript(A)

    def test_iterations_every_page_and_a_table(self):
        its = [{"seq": i, "attempt": 1, "action": "tune", "params": {"TILE_F": 128 << i}, "latency_ns": 1000.0 - i,
                "correct": True, "profile": {"bound": "dma"}} for i in range(5)]
        its[2]["validation"] = {"max_abs_err": 1e-6}

        def h(req):
            start = int(req.arg("cursor") or 0)
            nxt = start + 2 if start + 2 < len(its) else None
            return json_reply(200, {"items": its[start:start + 2], "next_cursor": None if nxt is None else str(nxt)})

        with FakeServer(h) as srv:
            got = client(srv).iterations(A, attempt=1)
        self.assertIsInstance(got, kc.IterationList)
        self.assertEqual([it["seq"] for it in got], [0, 1, 2, 3, 4])
        self.assertEqual(srv.requests[0].path, "/v1/jobs/%s/iterations" % A)
        self.assertEqual(srv.requests[0].arg("attempt"), "1")
        rows = got.rows()
        self.assertEqual(rows[1]["params.TILE_F"], 256)
        self.assertEqual(rows[2]["validation.max_abs_err"], 1e-6)
        self.assertIsNone(rows[0]["validation.max_abs_err"])
        self.assertEqual(list(rows[0])[:4], ["seq", "attempt", "action", "params.TILE_F"])

        with mock.patch.dict(sys.modules, {"pandas": None}):
            with self.assertRaisesRegex(ImportError, "needs pandas.*rows\\(\\)"):
                got.to_dataframe()
        try:
            import pandas  # noqa: F401
        except ImportError:
            return
        df = got.to_dataframe()
        self.assertEqual(df.shape[0], 5)
        self.assertEqual(list(df["params.TILE_F"]), [128, 256, 512, 1024, 2048])
        self.assertEqual(float(df["latency_ns"].min()), 996.0)

    def test_one_iteration_and_compare(self):
        def h(req):
            if req.path.startswith("/v1/jobs/"):
                return json_reply(200, {"seq": 3, "source": "def k(): pass", "source_diff": None})
            return json_reply(200, {"jobs": [{"id": A}, {"id": B}], "params_differ": {"TILE_F": [128, 512]}})

        with FakeServer(h) as srv:
            c = client(srv)
            self.assertEqual(c.iteration(A, 3, attempt=2)["source"], "def k(): pass")
            self.assertEqual(c.compare(A, kc.Job(job_doc(B)))["params_differ"], {"TILE_F": [128, 512]})
            for bad in (-1, "3", True):
                with self.assertRaises(ValueError):
                    c.iteration(A, bad)
            with self.assertRaises(ValueError):
                c.iteration(A, 1, attempt=0)
            with self.assertRaisesRegex(ValueError, "2 to 4"):
                c.compare(A, B, C, A, B)
        self.assertEqual((srv.requests[0].path, srv.requests[0].arg("attempt")), ("/v1/jobs/%s/iterations/3" % A, "2"))
        self.assertEqual((srv.requests[1].path, srv.requests[1].arg("jobs")), ("/v1/compare", "%s,%s" % (A, B)))


KERNEL = b"import nki\n@nki.jit\ndef softmax(x):\n    ...\n"
TRACE = b'{"traceEvents": []}'


def art(name, data, attempt=1, seq=3, final=True, sha=None):
    return {"name": name, "sha256": sha or hashlib.sha256(data).hexdigest(), "size": len(data),
            "content_type": "text/x-python", "attempt": attempt, "seq": seq, "final": final, "created_at": "t"}


class ArtifactTest(unittest.TestCase):
    def serve(self, listing, blobs, result=None):
        def h(req):
            if req.path.endswith("/artifacts"):
                return json_reply(200, {"items": listing})
            if req.path.startswith("/v1/artifacts/"):
                sha = req.path.rsplit("/", 1)[1]
                if sha in blobs:
                    return Reply(200, blobs[sha], {"Content-Type": "application/octet-stream", "ETag": '"%s"' % sha})
                return problem(404, "not-found", "Not found", "no artifact")
            return json_reply(200, job_doc(state="succeeded", result=result))

        return FakeServer(h)

    def test_the_final_set_by_name_checked(self):
        old = b"old kernel"
        listing = [art("kernel.py", old, seq=1, final=False), art("kernel.py", old, attempt=1, seq=2),
                   art("kernel.py", KERNEL, attempt=2, seq=1), art("trace.json", TRACE, attempt=2, seq=1)]
        blobs = {hashlib.sha256(b).hexdigest(): b for b in (old, KERNEL, TRACE)}
        with self.serve(listing, blobs) as srv:
            c = client(srv)
            self.assertEqual(len(c.artifacts(A)), 4)
            self.assertEqual(c.artifact(A, "trace.json"), TRACE)
            self.assertEqual(c.artifact(A, "kernel.py"), KERNEL, "the latest attempt's final set")
            self.assertEqual(c.best_kernel(A), KERNEL.decode())
            with self.assertRaises(kc.NotFound) as cm:
                c.artifact(A, "profile.json")
        self.assertIn("kernel.py, trace.json", cm.exception.detail)

    def test_bytes_that_do_not_match_are_refused(self):
        bad = art("trace.json", TRACE)
        with self.serve([bad], {bad["sha256"]: b'{"traceEvents": [1]}'[:len(TRACE)]}) as srv:
            with self.assertRaisesRegex(kc.KforgeError, "Corrupt artifact"):
                client(srv).artifact(A, "trace.json")
        longer = art("trace.json", TRACE)
        with self.serve([longer], {longer["sha256"]: TRACE + b" "}) as srv:
            with self.assertRaisesRegex(kc.KforgeError, "too large"):
                client(srv).artifact(A, "trace.json")
        for hostile in ("../../v1/jobs", "A" * 64):
            with self.serve([art("trace.json", TRACE, sha=hostile)], {}) as srv:
                with self.assertRaisesRegex(kc.KforgeError, "without a SHA-256"):
                    client(srv).artifact(A, "trace.json")
            self.assertFalse(any(r.path.startswith("/v1/artifacts") for r in srv.requests))

    def test_best_kernel_of_a_job_from_before_artifacts(self):
        with self.serve([], {}, result={"best": {"source": "def old(): pass\n"}}) as srv:
            self.assertEqual(client(srv).best_kernel(A), "def old(): pass\n")
        with self.serve([], {}, result=None) as srv:
            with self.assertRaisesRegex(kc.NotFound, "no best kernel"):
                client(srv).best_kernel(A)


def sse(*events, comments=False):
    out = []
    for eid, kind, data in events:
        if comments:
            out.append(b": hb\n")
        out.append(("id: %d\nevent: %s\ndata: %s\n\n" % (eid, kind, json.dumps(data))).encode())
    return out


class WaitTest(unittest.TestCase):
    def test_follows_the_stream_across_a_drop(self):
        first = [b"retry: 10\n\n"] + sse((1, "state", {"type": "created", "to": "queued"}),
                                         (2, "iteration", {"seq": 0, "latency_ns": 900.0}), comments=True)
        first.append(b"id: 3\nevent: iteration\ndata: {\"seq\": 1")   # cut mid-event: never dispatched
        second = sse((3, "iteration", {"seq": 1, "latency_ns": 800.0}), (4, "state", {"type": "succeeded"}),
                     (5, "end", {"job_id": A, "state": "succeeded"}))
        streams = [first, second]

        def h(req):
            if req.path.endswith("/stream"):
                return Reply(200, headers={"Content-Type": "text/event-stream"}, chunks=streams.pop(0))
            return json_reply(200, job_doc(state="succeeded"))

        seen = []
        with FakeServer(h) as srv:
            job = client(srv).wait(A, on_iteration=lambda d: seen.append(("it", d["seq"])),
                                   on_state=lambda d: seen.append(("state", d["type"])), timeout=30)
        self.assertEqual(job.state, "succeeded")
        self.assertEqual(seen, [("state", "created"), ("it", 0), ("it", 1), ("state", "succeeded")])
        reqs = [r for r in srv.requests if r.path.endswith("/stream")]
        self.assertEqual(reqs[0].headers["accept"], "text/event-stream")
        self.assertNotIn("last-event-id", reqs[0].headers)
        self.assertEqual(reqs[1].headers["last-event-id"], "2")
        self.assertEqual(srv.requests[-1].path, "/v1/jobs/" + A)

    def test_timeout_while_the_stream_only_beats(self):
        def beats():
            for _ in range(40):
                yield b": hb\n"
                time.sleep(0.05)

        with FakeServer(lambda req: Reply(200, headers={"Content-Type": "text/event-stream"}, chunks=beats())) \
                as srv:
            t0 = time.monotonic()
            with self.assertRaises(kc.WaitTimeout):
                client(srv).wait(A, timeout=0.4)
            self.assertLess(time.monotonic() - t0, 1.5)

    def test_a_stream_that_keeps_closing_empty_gives_up(self):
        with FakeServer(lambda req: Reply(200, headers={"Content-Type": "text/event-stream"},
                                          chunks=[b"retry: 1\n\n"])) as srv:
            with self.assertRaisesRegex(kc.Unavailable, "closed 3 times"):
                client(srv, retries=2).wait(A, timeout=10)
        self.assertEqual(len(srv.requests), 3)

    def test_a_stream_closed_after_heartbeats_is_alive(self):
        streams = [[b"retry: 1\n: hb\n"]] * 4 + [sse((9, "end", {"job_id": A, "state": "failed"}))]

        def h(req):
            if req.path.endswith("/stream"):
                return Reply(200, chunks=streams.pop(0))
            return json_reply(200, job_doc(state="failed"))

        with FakeServer(h) as srv:
            self.assertEqual(client(srv, retries=2).wait(A, timeout=10).state, "failed")
        self.assertEqual(len(srv.requests), 6)

    def test_errors_of_the_stream(self):
        with FakeServer(lambda req: problem(404, "not-found", "Not found", "no such job")) as srv:
            with self.assertRaises(kc.NotFound):
                client(srv).wait(B, timeout=10)
        for bad in (b"{oops", b"[" * 100000):
            with FakeServer(lambda req: Reply(200, chunks=[b"event: state\ndata: " + bad + b"\n\n"])) as srv:
                with self.assertRaisesRegex(kc.KforgeError, "not JSON"):
                    client(srv).wait(A, timeout=10)
        with FakeServer(lambda req: Reply(200, chunks=[b"event: iteration\ndata: [1]\n\n"])) as srv:
            with self.assertRaisesRegex(kc.KforgeError, "not an object"):
                client(srv).wait(A, timeout=10)

        def boom(data):
            raise RuntimeError("callback failed")

        with FakeServer(lambda req: Reply(200, chunks=sse((1, "iteration", {"seq": 0})))) as srv:
            with self.assertRaisesRegex(RuntimeError, "callback failed"):
                client(srv).wait(A, on_iteration=boom, timeout=10)


class LibraryTest(unittest.TestCase):
    def test_library_pages_entry_and_kernel(self):
        entries = [{"id": "add-trn2-bfloat16-sim-%012d" % i, "op": "add", "latency_ns": 100.0 + i} for i in range(3)]

        def h(req):
            if req.path == "/v1/library":
                start = int(req.arg("cursor")[-1]) + 1 if req.arg("cursor") else 0
                nxt = entries[start + 1]["id"] if start + 2 < len(entries) else None
                return json_reply(200, {"items": entries[start:start + 2], "next_cursor": nxt})
            if req.path.endswith("/kernel"):
                return Reply(200, b"# kforge kernel library entry x\n", {"Content-Type": "text/x-python; charset=utf-8"})
            return json_reply(200, dict(entries[0], history=[{"reason": "created"}]))

        with FakeServer(h) as srv:
            c = client(srv)
            got = c.library(op="add", target="trn2")
            one = c.library_entry(got[0])
            text = c.library_kernel(got[0]["id"])
        self.assertEqual([e["id"] for e in got], [e["id"] for e in entries])
        self.assertEqual(srv.requests[0].arg("op"), "add")
        self.assertEqual(srv.requests[0].arg("target"), "trn2")
        self.assertEqual(one["history"][0]["reason"], "created")
        self.assertTrue(text.startswith("# kforge kernel library entry"))
        with self.assertRaises(ValueError):
            c.library_entry("../etc")
        with self.assertRaises(ValueError):
            c.library(colour="red")


BATCH = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
BASE = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
COUNTS = {"queued": 2, "running": 1, "retrying": 0, "succeeded": 1, "failed": 0, "cancelled": 0, "dead": 0}


def batch_doc(bid=BATCH, state="open", **more):
    d = {"id": bid, "name": "nightly", "source": "library", "priority": 2, "n_jobs": 4, "matrix_hash": "9f2c",
         "idempotency_key": None, "created_at": "t", "state": state, "counts": COUNTS, "finished": 1,
         "progress": 0.25, "started_at": "t", "finished_at": None}
    d.update(more)
    return d


def entry(seq, state="succeeded"):
    return {"job_id": [A, B, C, A][seq], "seq": seq, "key": "add|4096|bfloat16|trn%d" % (seq + 1), "op": "add",
            "shape": "4096", "dtype": "bfloat16", "target": "trn%d" % (seq + 1), "state": state, "attempt": 1,
            "last_error": None, "best": None}


class BatchTest(unittest.TestCase):
    def test_submit_both_forms_with_an_idempotency_key(self):
        def h(req):
            return json_reply(202, batch_doc(source="library" if "library" in req.json() else "matrix"),
                              {"Location": "/v1/batches/" + BATCH})

        template = {"kind": "generate", "budget": {"iterations": 40}, "labels": {"team": "kernels"}}
        matrix = {"op": ["rmsnorm", "softmax"], "shapes": [[[4096, 8192], [8192]], [[2048, 4096]]],
                  "target": ["trn2", "trn3"]}
        with FakeServer(h) as srv:
            c = client(srv)
            got = c.submit_batch(template, matrix, name="retune-sdk-2.21", priority=1, idempotency_key='n "1"')
            lib = c.submit_batch(library="all", targets=("trn1", "trn2"), dtypes=["bfloat16"], backend="sim",
                                 budget={"iterations": 40}, goal={"fraction_of_bound": 0.9}, name="nightly")
            c.submit_batch(library=["add", "softmax"], targets=["trn2"], max_attempts=2, labels={"k": "v"})
        self.assertEqual((got["id"], got["source"], lib["source"]), (BATCH, "matrix", "library"))
        first, second, third = srv.requests
        self.assertEqual((first.method, first.path), ("POST", "/v1/batches"))
        self.assertEqual(first.headers["content-type"], "application/json")
        self.assertEqual(first.headers["idempotency-key"], '"n \\"1\\""')
        self.assertEqual(first.json(), {"template": template, "matrix": matrix, "name": "retune-sdk-2.21",
                                        "priority": 1})
        self.assertNotIn("idempotency-key", second.headers)
        self.assertEqual(second.json(), {"library": "all", "targets": ["trn1", "trn2"], "dtypes": ["bfloat16"],
                                         "backend": "sim", "budget": {"iterations": 40},
                                         "goal": {"fraction_of_bound": 0.9}, "name": "nightly"})
        self.assertEqual(third.json(), {"library": ["add", "softmax"], "targets": ["trn2"], "max_attempts": 2,
                                        "labels": {"k": "v"}})

    def test_a_keyed_batch_is_retried_an_unkeyed_one_is_not(self):
        answers = [problem(503, "unavailable", "Service unavailable", "db away", retry_after=1),
                   problem(409, "idempotency-key-in-use", "Conflict", "first still running", retry_after=1),
                   json_reply(202, batch_doc(), {"Idempotent-Replayed": "true"})]
        with FakeServer(lambda req: answers.pop(0)) as srv, mock.patch("time.sleep"):
            got = client(srv).submit_batch(library="all", targets=["trn2"], idempotency_key="nightly-12-02")
        self.assertEqual(got["id"], BATCH)
        self.assertEqual(len(srv.requests), 3)
        self.assertTrue(all(r.headers["idempotency-key"] == '"nightly-12-02"' for r in srv.requests))
        self.assertEqual(srv.requests[0].body, srv.requests[2].body)

        fields = [{"field": "matrix", "rule": "limit", "detail": "11 op x 1000 shapes x 1 dtype x 1 target"}]
        answers = [problem(503, "unavailable", "Service unavailable", "db away", retry_after=1),
                   problem(422, "validation", "Unprocessable request", "matrix: ...", errors=fields)]
        with FakeServer(lambda req: answers.pop(0)) as srv, mock.patch("time.sleep") as sleep:
            with self.assertRaises(kc.Unavailable):
                client(srv).submit_batch(library="all", targets=["trn2"])
            with self.assertRaises(kc.Unprocessable) as cm:
                client(srv).submit_batch(library="all", targets=["trn2"], idempotency_key="k")
        self.assertEqual(len(srv.requests), 2)
        sleep.assert_not_called()
        self.assertEqual(cm.exception.errors, fields)

    def test_submit_refuses_what_could_never_be_sent(self):
        c = kc.Client("http://127.0.0.1:1", TOKEN)
        t, m = {"kind": "generate"}, {"target": ["trn2"]}
        bad = [((), {}), ((t,), {}), ((t, ["trn2"]), {}), ((t, m), {"library": "all", "targets": ["trn2"]}),
               ((t, m), {"targets": ["trn2"]}), ((t, m), {"budget": {"iterations": 1}}),
               ((), {"library": "some", "targets": ["trn2"]}), ((), {"library": "all"}),
               ((), {"library": "all", "targets": "trn2"}), ((), {"library": "all", "targets": []}),
               ((), {"library": "all", "targets": ["trn2"], "dtypes": "bfloat16"}),
               ((), {"library": "all", "targets": ["trn2"], "idempotency_key": "k\u00e9y"})]
        for args, kw in bad:
            with self.assertRaises(ValueError, msg=(args, kw)):
                c.submit_batch(*args, **kw)

    def test_the_roll_up_with_every_entry_page(self):
        pages = {None: {"entries": [entry(0), entry(1)], "next_cursor": "e2"},
                 "e2": {"entries": [entry(2)], "next_cursor": "e3"},
                 "e3": {"entries": [entry(3, "running")], "next_cursor": None}}

        def h(req):
            if req.path != "/v1/batches/" + BATCH:
                return problem(404, "not-found", "Not found", "no batch")
            return json_reply(200, dict(batch_doc(progress=0.25 * (len(srv.requests))), **pages[req.arg("cursor")]))

        with FakeServer(h) as srv:
            c = client(srv)
            got = c.batch(batch_doc(), limit=2)
            with self.assertRaises(kc.NotFound):
                c.batch(BASE)
        self.assertEqual([e["seq"] for e in got["entries"]], [0, 1, 2, 3])
        self.assertEqual((got["state"], got["n_jobs"], got["next_cursor"]), ("open", 4, None))
        self.assertEqual(got["progress"], 0.75, "the roll-up of the last page read")
        self.assertEqual([r.arg("cursor") for r in srv.requests[:3]], [None, "e2", "e3"])
        self.assertTrue(all(r.arg("limit") == "2" for r in srv.requests[:3]))

        with FakeServer(lambda req: json_reply(200, dict(batch_doc(), entries=[], next_cursor="same"))) as srv:
            with self.assertRaisesRegex(kc.KforgeError, "next_cursor repeats"):
                client(srv).batch(BATCH)
        with FakeServer(lambda req: json_reply(200, batch_doc())) as srv:
            with self.assertRaisesRegex(kc.KforgeError, "without entries"):
                client(srv).batch(BATCH)
        c = kc.Client("http://127.0.0.1:1", TOKEN)
        for bad in ("../v1/jobs", {"name": "no id"}, 7):
            with self.assertRaises(ValueError):
                c.batch(bad)
        with self.assertRaises(ValueError):
            c.batch(BATCH, limit=0)

    def test_batches_follow_the_cursor(self):
        pages = {None: {"items": [batch_doc(BATCH)], "next_cursor": "b1"},
                 "b1": {"items": [batch_doc(BASE, state="finished")], "next_cursor": None}}
        with FakeServer(lambda req: json_reply(200, pages[req.arg("cursor")])) as srv:
            it = client(srv).batches(limit=1)
            self.assertEqual(srv.requests, [], "a page is asked for when the iteration reaches it")
            got = list(it)
        self.assertEqual([(b["id"], b["state"]) for b in got], [(BATCH, "open"), (BASE, "finished")])
        self.assertEqual([(r.path, r.arg("cursor"), r.arg("limit")) for r in srv.requests],
                         [("/v1/batches", None, "1"), ("/v1/batches", "b1", "1")])

    def test_cancel(self):
        answers = [problem(503, "unavailable", "Service unavailable", "db away", retry_after=1),
                   json_reply(200, batch_doc(cancelled=2, cancel_requested=1)),
                   json_reply(200, batch_doc(cancelled=0, cancel_requested=0))]
        with FakeServer(lambda req: answers.pop(0)) as srv, mock.patch("time.sleep"):
            c = client(srv)
            first = c.cancel_batch(BATCH, reason="sdk 2.21 withdrawn")
            again = c.cancel_batch(batch_doc(), idempotency_key="cancel-1")
        self.assertEqual((first["cancelled"], first["cancel_requested"]), (2, 1))
        self.assertEqual((again["cancelled"], again["cancel_requested"]), (0, 0))
        self.assertEqual(len(srv.requests), 3, "a cancel is retried: it moves nothing twice")
        r0, _, r2 = srv.requests
        self.assertEqual((r0.method, r0.path), ("POST", "/v1/batches/%s/cancel" % BATCH))
        self.assertEqual(r0.json(), {"reason": "sdk 2.21 withdrawn"})
        self.assertNotIn("idempotency-key", r0.headers)
        self.assertEqual(r2.body, b"")
        self.assertEqual(r2.headers["idempotency-key"], '"cancel-1"')
        with self.assertRaises(ValueError):
            c.cancel_batch(BATCH, reason=3)

    def test_report_as_json_markdown_and_csv(self):
        report = {"batch": BATCH, "baseline": BASE, "threshold": 0.05,
                  "summary": {"improved": 1, "regressed": 0, "unchanged": 3, "failed": 0, "new": 0, "missing": 0,
                              "pending": 0},
                  "entries": [{"key": "add|4096|bfloat16|trn1", "verdict": "improved", "ratio": 0.9,
                               "new": {"job_id": A, "state": "succeeded", "latency_ns": 90.0},
                               "old": {"job_id": B, "state": "succeeded", "latency_ns": 100.0},
                               "provenance_diff": {"sim_build": {"old": "1.4.0", "new": "1.5.0"}}}]}
        md = "# Batch %s against %s (threshold 3%%)\n\n| improved | ... |\n" % (BATCH, BASE)
        csv = ("op,shape,dtype,target,old_latency_ns,new_latency_ns,ratio,verdict,new_job,old_job,"
               "provenance_changed\r\nadd,4096,bfloat16,trn1,100,90,0.9,improved,%s,%s,sim_build;target_hash\r\n"
               % (A, B))

        def h(req):
            fmt = req.arg("format")
            if req.arg("baseline") == C:
                return problem(404, "not-found", "Not found", "no batch %s" % C)
            if fmt == "md":
                return Reply(200, md.encode(), {"Content-Type": "text/markdown; charset=utf-8"})
            if fmt == "csv":
                return Reply(200, csv.encode(), {"Content-Type": "text/csv; charset=utf-8"})
            return json_reply(200, report)

        with FakeServer(h) as srv:
            c = client(srv)
            got = c.batch_report(batch_doc(), baseline=batch_doc(BASE), threshold=0.05)
            text = c.batch_report(BATCH, format="md")
            table = c.batch_report(BATCH, baseline=BASE, threshold=0, format="csv")
            with self.assertRaises(kc.NotFound):
                c.batch_report(BATCH, baseline=C)
        self.assertEqual(got, report)
        self.assertEqual(text, md)
        self.assertEqual(table, csv, "the CRLF line ends as the API sent them")
        r0, r1, r2 = srv.requests[:3]
        self.assertEqual(r0.path, "/v1/batches/%s/report" % BATCH)
        self.assertEqual(r0.query, [("baseline", BASE), ("threshold", "0.05")])
        self.assertEqual(r1.query, [("format", "md")])
        self.assertEqual(r1.headers["accept"], "text/markdown")
        self.assertEqual(r2.query, [("baseline", BASE), ("threshold", "0.0"), ("format", "csv")])
        self.assertEqual(r2.headers["accept"], "text/csv")
        for kw in ({"format": "html"}, {"threshold": 1}, {"threshold": -0.01}, {"threshold": True},
                   {"threshold": "0.03"}, {"threshold": float("nan")}, {"baseline": "latest"}):
            with self.assertRaises(ValueError, msg=kw):
                c.batch_report(BATCH, **kw)

    def test_wait_batch_follows_the_stream_across_drops(self):
        roll = {"batch_id": BATCH, "n_jobs": 2, "counts": COUNTS, "progress": 0.0}
        first = [b"retry: 10\n\n", b"event: batch\ndata: " + json.dumps(roll).encode() + b"\n\n"]
        second = sse((11, "state", {"job_id": A, "type": "created", "to": "queued"}),
                     (12, "iteration", {"job_id": A, "seq": 0, "latency_ns": 900.0}), comments=True)
        second += [b"event: batch\ndata: " + json.dumps(dict(roll, progress=0.5)).encode() + b"\n\n",
                   b"id: 13\nevent: state\ndata: {\"job_id\""]      # cut mid-event: never dispatched
        third = sse((13, "state", {"job_id": A, "type": "succeeded"}))
        third += [b"event: batch\ndata: " + json.dumps(dict(roll, progress=1.0)).encode() + b"\n\n",
                  b"event: end\ndata: " + json.dumps({"batch_id": BATCH, "state": "finished"}).encode() + b"\n\n"]
        streams = [first, second, third]

        def h(req):
            if req.path.endswith("/stream"):
                return Reply(200, headers={"Content-Type": "text/event-stream"}, chunks=streams.pop(0))
            return json_reply(200, dict(batch_doc(state="finished"), entries=[entry(0)], next_cursor=None))

        seen = []
        with FakeServer(h) as srv:
            got = client(srv).wait_batch(BATCH, on_batch=lambda d: seen.append(("batch", d["progress"])),
                                         on_state=lambda d: seen.append(("state", d["type"])),
                                         on_iteration=lambda d: seen.append(("it", d["seq"])), timeout=30)
        self.assertEqual(got["state"], "finished")
        self.assertEqual(got["entries"], [entry(0)])
        self.assertEqual(seen, [("batch", 0.0), ("state", "created"), ("it", 0), ("batch", 0.5),
                                ("state", "succeeded"), ("batch", 1.0)])
        reqs = [r for r in srv.requests if r.path.endswith("/stream")]
        self.assertEqual([r.path for r in reqs], ["/v1/batches/%s/stream" % BATCH] * 3)
        self.assertEqual(reqs[0].headers["accept"], "text/event-stream")
        self.assertNotIn("last-event-id", reqs[0].headers)
        self.assertNotIn("last-event-id", reqs[1].headers, "a roll-up has no id: no position yet")
        self.assertEqual(reqs[2].headers["last-event-id"], "12", "the last job event's, not a roll-up's")
        self.assertEqual(srv.requests[-1].path, "/v1/batches/" + BATCH)

    def test_wait_batch_errors_and_timeout(self):
        with FakeServer(lambda req: problem(404, "not-found", "Not found", "no such batch")) as srv:
            with self.assertRaises(kc.NotFound):
                client(srv).wait_batch(BATCH, timeout=10)
        with FakeServer(lambda req: Reply(200, chunks=[b"event: batch\ndata: {oops\n\n"])) as srv:
            with self.assertRaisesRegex(kc.KforgeError, "batch %s: a batch event whose data is not JSON" % BATCH):
                client(srv).wait_batch(BATCH, timeout=10)

        def beats():
            for _ in range(40):
                yield b": hb\n"
                time.sleep(0.05)

        with FakeServer(lambda req: Reply(200, headers={"Content-Type": "text/event-stream"}, chunks=beats())) \
                as srv:
            with self.assertRaisesRegex(kc.WaitTimeout, "batch %s did not end" % BATCH):
                client(srv).wait_batch(BATCH, timeout=0.4)
        with self.assertRaises(ValueError):
            kc.Client("http://127.0.0.1:1", TOKEN).wait_batch("nightly")


if __name__ == "__main__":
    unittest.main()
