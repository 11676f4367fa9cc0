#!/usr/bin/env python3
"""Issue 15's done-when, as a notebook does it, with kforge_client alone,
against a running stack (kforge-api + scheduler + a sim worker):

  an earlier run, then a run watched live (its state changes and each
  iteration as they happen), every iteration pulled into a table, the best
  kernel and its trace downloaded, the two runs compared; the light list
  finds both by label; another user's token sees none of it (404).

Environment: KFORGE_URL, KFORGE_TOKEN (a user token), KFORGE_OTHER_TOKEN
(another user's).  Run by tests/integration/test_pyclient.c, which checks
the exit status, the last line ("notebook_e2e: ok job=... earlier=...
iterations=N") and PostgreSQL against it.  Any failed check exits 1 with
what was expected and what came.
"""

import json
import os
import signal
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kforge_client as kc  # noqa: E402

TIME_LIMIT_S = 280      # the whole notebook; the C test's own limit is longer
WAIT_S = 200            # one job, submit to end


def check(cond, what, got=None):
    if not cond:
        print("notebook_e2e: FAILED: %s%s" % (what, "" if got is None else "; got: %.600s" % (got,)), flush=True)
        sys.exit(1)


def run(kf, labels, iterations, key):
    """A small generate job on the simulator (seconds, not minutes)."""
    return kf.submit("generate", target="trn2", backend="sim", max_attempts=1, budget={"iterations": iterations},
                     labels=labels, idempotency_key=key, op="softmax", shapes=[[128, 512]], dtype="bfloat16")


def main():
    check(sys.version_info >= (3, 9), "Python >= 3.9", sys.version)
    signal.alarm(TIME_LIMIT_S)
    kf = kc.Client()
    other = kc.Client(token=os.environ["KFORGE_OTHER_TOKEN"])
    tag = uuid.uuid4().hex[:12]

    # an earlier run, watched without callbacks
    earlier = kf.wait(run(kf, {"notebook": tag, "run": "earlier"}, 3, tag + "-earlier"), timeout=WAIT_S)
    check(earlier.state == "succeeded", "the earlier run succeeds", earlier.data)

    # the run of the day, watched live; a re-run of the cell is the same job
    key = tag + "-today"
    job = run(kf, {"notebook": tag, "run": "today"}, 5, key)
    check(run(kf, {"notebook": tag, "run": "today"}, 5, key).id == job.id, "a repeated keyed submit is one job")
    states, live = [], []
    job = kf.wait(job, on_state=states.append, on_iteration=live.append, timeout=WAIT_S)
    check(job.state == "succeeded", "the watched run succeeds", job.data)
    types = [s.get("type") for s in states]
    check("started" in types and types[-1] == "succeeded" and types.index("started") < len(types) - 1,
          "state events: started ... succeeded, in order", types)
    check(all(s.get("job_id") == job.id for s in states + live), "every event names its job")
    check(len(live) >= 1, "iterations arrive live", live)
    for it in live:
        check(isinstance(it.get("seq"), int) and "params" in it and "latency_ns" in it and "best_so_far_ns" in it,
              "an iteration event carries seq, params, latency_ns, best_so_far_ns", it)

    # every iteration into a table
    table = kf.iterations(job)
    check(sorted((it["attempt"], it["seq"]) for it in table) == sorted((it["attempt"], it["seq"]) for it in live),
          "the table holds exactly the iterations seen live", [(it["attempt"], it["seq"]) for it in table])
    rows = table.rows()
    check(all("latency_ns" in r and "correct" in r for r in rows), "each row has latency_ns and correct", rows[:1])
    check(any(k.startswith("params.") for k in rows[0]), "params are columns (params.NAME)", list(rows[0]))
    try:
        import pandas  # noqa: F401
    except ImportError:
        pandas = None
    if pandas is not None:
        df = table.to_dataframe()
        check(df.shape[0] == len(table) and "latency_ns" in df.columns, "the DataFrame has a row per iteration",
              df.shape)
    one = kf.iteration(job, table[-1]["seq"], attempt=table[-1]["attempt"])
    check(isinstance(one.get("source"), str) and "softmax" in one["source"], "one iteration carries its source",
          sorted(one))
    correct = [it["latency_ns"] for it in table if it.get("correct") and it.get("latency_ns") is not None]
    check(correct, "at least one correct iteration", table)

    # the best kernel and its trace
    kernel = kf.best_kernel(job)
    check("def softmax(" in kernel, "the best kernel is the softmax source", kernel)
    check(kernel == job.result["best"]["source"], "the downloaded kernel is the result's best source")
    trace = json.loads(kf.artifact(job, "trace.json").decode("utf-8"))
    check(isinstance(trace, (dict, list)) and trace, "trace.json is a JSON trace", trace)
    names = set(a["name"] for a in kf.artifacts(job) if a.get("final"))
    check({"kernel.py", "profile.json", "instructions.json", "trace.json"} <= names, "the final artifact set", names)

    # compared with the earlier run
    cmp = kf.compare(earlier, job)
    check([j.get("id") for j in cmp.get("jobs", [])] == [earlier.id, job.id], "compare answers both, in order", cmp)
    now = cmp["jobs"][1]
    check(abs(now["best"]["latency_ns"] - min(correct)) <= 1e-6 * min(correct),
          "compare's best latency is the fastest correct iteration", (now["best"], min(correct)))
    curve = [point[1] for point in now["curve"]]
    check(curve and all(b <= a for a, b in zip(curve, curve[1:])), "the best-so-far curve never rises", curve)
    for field in ("params_differ", "profile_deltas", "findings_only", "provenance_differ", "source_diff"):
        check(field in cmp, "compare has %s" % field, sorted(cmp))

    # the light list finds both runs by label and op
    listed = [j.id for j in kf.jobs(labels={"notebook": tag}, op="softmax", limit=1)]
    check(sorted(listed) == sorted([earlier.id, job.id]), "jobs(labels=...) pages to both runs", listed)
    check(all(j.get("result") is None for j in kf.jobs(labels={"notebook": tag})), "the light list has no result")

    # another user sees none of it
    for name, call in (("get", lambda: other.get(job)), ("iterations", lambda: other.iterations(job)),
                       ("artifacts", lambda: other.artifacts(job)), ("wait", lambda: other.wait(job, timeout=30)),
                       ("compare", lambda: other.compare(earlier, job))):
        try:
            call()
        except kc.NotFound:
            continue
        except kc.KforgeError as exc:
            check(False, "another user's %s is 404" % name, repr(exc))
        check(False, "another user's %s is 404" % name, "an answer")
    check(list(other.jobs(labels={"notebook": tag})) == [], "another user's list is empty")

    print("notebook_e2e: ok job=%s earlier=%s iterations=%d" % (job.id, earlier.id, len(table)), flush=True)


if __name__ == "__main__":
    try:
        main()
    except kc.KforgeError as exc:
        print("notebook_e2e: FAILED: %s: %s" % (type(exc).__name__, exc), flush=True)
        sys.exit(1)
