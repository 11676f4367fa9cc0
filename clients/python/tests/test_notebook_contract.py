"""notebook_e2e.py against a scripted server that answers as docs/runs.md
says the routes do: the notebook session, checked before the real routes
exist on a branch (tests/integration/test_pyclient runs it against a real
stack), and a check that the session and the client agree with the
contract's shapes.  Also: the session fails, and says why, when a route
answers what the contract does not promise."""

import hashlib
import json
import os
import subprocess
import sys
import unittest
import uuid

from fakeserver import TOKEN, FakeServer, Reply, json_reply, problem

OTHER = "kf_secret_bob_9876543210"
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notebook_e2e.py")


class ContractServer:
    """Jobs kept in memory; a submitted generate job has, at once, its whole
    history: events, iterations, artifacts, a result."""

    def __init__(self, break_route=None):
        self.jobs = {}          # id -> (owner token, doc, events, iterations)
        self.keys = {}          # (token, key) -> id
        self.blobs = {}
        self.arts = {}
        self.break_route = break_route

    def handle(self, req):
        tok = req.headers["authorization"][len("Bearer "):]
        parts = req.path.strip("/").split("/")
        if req.method == "POST" and req.path == "/v1/jobs":
            return self.submit(tok, req)
        if req.path == "/v1/jobs":
            return self.list(tok, req)
        if req.path == "/v1/compare":
            ids = req.arg("jobs").split(",")
            for jid in ids:
                if jid not in self.jobs or self.jobs[jid][0] != tok:
                    return problem(404, "not-found", "Not found", "no job %s" % jid)
            return json_reply(200, self.compare(ids))
        if parts[:2] == ["v1", "artifacts"]:
            return Reply(200, self.blobs[parts[2]], {"Content-Type": "application/octet-stream"})
        jid = parts[2]
        if jid not in self.jobs or self.jobs[jid][0] != tok:
            return problem(404, "not-found", "Not found", "no job %s" % jid)
        _, doc, events, its = self.jobs[jid]
        rest = parts[3:]
        if rest and rest[0] == self.break_route:
            return json_reply(200, {"unexpected": True})
        if not rest:
            return json_reply(200, doc)
        if rest == ["stream"]:
            body = [b": hb\n"] + [("id: %d\nevent: %s\ndata: %s\n\n" % (i + 1, t, json.dumps(d))).encode()
                                  for i, (t, d) in enumerate(events)]
            return Reply(200, headers={"Content-Type": "text/event-stream"}, chunks=body)
        if rest == ["iterations"]:
            start = int(req.arg("cursor") or 0)
            n = int(req.arg("limit"))
            nxt = start + n if start + n < len(its) else None
            return json_reply(200, {"items": its[start:start + n], "next_cursor": None if nxt is None else str(nxt)})
        if rest[0] == "iterations":
            it = dict(its[int(rest[1])])
            it.update(source="def softmax(x, TILE_F=%d): ..." % it["params"]["TILE_F"], source_diff=None)
            return json_reply(200, it)
        if rest == ["artifacts"]:
            return json_reply(200, {"items": self.arts[jid]})
        return problem(404, "not-found", "Not found", "no route")

    def submit(self, tok, req):
        key = req.headers.get("idempotency-key")
        if key and (tok, key) in self.keys:
            return json_reply(202, self.jobs[self.keys[(tok, key)]][1])
        body = req.json()
        jid = str(uuid.uuid4())
        n = body["budget"]["iterations"]
        its, best = [], None
        for seq in range(n):
            lat = 1000.0 - 10 * seq + (30 if seq == 2 else 0)
            best = lat if best is None else min(best, lat)
            its.append({"seq": seq, "attempt": 1, "action": "tune", "reason": "r", "params": {"TILE_F": 128 << seq},
                        "latency_ns": lat, "fraction_of_bound": 0.5, "correct": True, "validation": {"checked": 8},
                        "findings": [], "profile": {"bound": "dma"}, "best_so_far_ns": best, "created_at": "t"})
        source = "def softmax(x, TILE_F=%d): ...\n" % (128 << (n - 1))
        doc = {"id": jid, "kind": "generate", "state": "succeeded", "target": "trn2", "labels": body["labels"],
               "spec": body["spec"], "result": {"best": {"source": source}, "latency_ns": best}}
        events = [("state", {"job_id": jid, "type": "created", "to": "queued"}),
                  ("state", {"job_id": jid, "type": "started", "to": "running"})]
        events += [("iteration", dict(job_id=jid, **{k: it[k] for k in ("attempt", "seq", "params", "latency_ns",
                                                                          "fraction_of_bound", "correct",
                                                                          "best_so_far_ns")})) for it in its]
        events += [("state", {"job_id": jid, "type": "succeeded", "to": "succeeded"}),
                   ("end", {"job_id": jid, "state": "succeeded"})]
        arts = []
        for name, data, final in (("kernel.py", b"def softmax(x, TILE_F=128): ...\n", False),
                                  ("kernel.py", source.encode(), True), ("profile.json", b"{}", True),
                                  ("instructions.json", b"[]", True), ("trace.json", b'{"traceEvents": [{}]}', True)):
            sha = hashlib.sha256(data).hexdigest()
            self.blobs[sha] = data
            arts.append({"name": name, "sha256": sha, "size": len(data), "content_type": "application/json",
                         "attempt": 1, "seq": n - 1 if final else 0, "final": final, "created_at": "t"})
        self.arts[jid] = arts
        self.jobs[jid] = (tok, doc, events, its)
        if key:
            self.keys[(tok, key)] = jid
        return json_reply(202, dict(doc, state="queued", result=None))

    def list(self, tok, req):
        want = {k[len("label."):]: v for k, v in req.query if k.startswith("label.")}
        mine = [d for t, d, _, _ in self.jobs.values() if t == tok and all(d["labels"].get(k) == v
                                                                           for k, v in want.items())]
        light = [{k: v for k, v in d.items() if k != "result"} for d in reversed(mine)]
        start = int(req.arg("cursor") or 0)
        n = int(req.arg("limit") or 50)
        nxt = start + n if start + n < len(light) else None
        return json_reply(200, {"items": light[start:start + n], "next_cursor": None if nxt is None else str(nxt)})

    def compare(self, ids):
        jobs = []
        for jid in ids:
            its = self.jobs[jid][3]
            best = min(its, key=lambda it: it["latency_ns"])
            jobs.append({"id": jid, "best": {"seq": best["seq"], "latency_ns": best["latency_ns"]},
                         "curve": [[it["seq"], it["best_so_far_ns"]] for it in its]})
        return {"jobs": jobs, "params_differ": {}, "profile_deltas": {}, "findings_only": {},
                "provenance_differ": {}, "source_diff": []}


def run_notebook(srv):
    env = dict(os.environ, KFORGE_URL=srv.url, KFORGE_TOKEN=TOKEN, KFORGE_OTHER_TOKEN=OTHER,
               PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, SCRIPT], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=120).stdout.decode()


class NotebookContractTest(unittest.TestCase):
    def test_the_session_passes_against_the_contract(self):
        cs = ContractServer()
        with FakeServer(cs.handle, tokens=(TOKEN, OTHER)) as srv:
            out = run_notebook(srv)
        self.assertRegex(out, r"notebook_e2e: ok job=\S+ earlier=\S+ iterations=5\n\Z", out)
        self.assertEqual(len(cs.jobs), 2, "the repeated keyed submit made no third job")

    def test_the_session_fails_on_what_the_contract_does_not_promise(self):
        for route, why in (("iterations", "a page without items"), ("artifacts", "a page without items")):
            with FakeServer(ContractServer(break_route=route).handle, tokens=(TOKEN, OTHER)) as srv:
                out = run_notebook(srv)
            self.assertIn("notebook_e2e: FAILED", out)
            self.assertIn(why, out)
            self.assertNotIn("notebook_e2e: ok", out)


if __name__ == "__main__":
    unittest.main()
