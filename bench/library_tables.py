"""Tables of bench/library.sh: two batches of the kernel library, the second
a re-tune with nothing changed.  Reads the batches, their jobs and the
second batch's report through the public API.

usage: library_tables.py API_URL TOKEN_FILE FIRST_BATCH SECOND_BATCH
Exit 1 when the second batch took more than 10% of the first's wall time or
its report has an entry that is not `unchanged`.
"""
import datetime
import json
import sys
import urllib.request

API, TOKEN = sys.argv[1], open(sys.argv[2]).read().strip()
FIRST, SECOND = sys.argv[3], sys.argv[4]


def get(path):
    req = urllib.request.Request(API + path, headers={"Authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))


def batch(bid):
    b = get(f"/v1/batches/{bid}?limit=1000")
    entries = list(b["entries"])
    while b.get("next_cursor"):
        b2 = get(f"/v1/batches/{bid}?limit=1000&cursor={b['next_cursor']}")
        entries += b2["entries"]
        b["next_cursor"] = b2.get("next_cursor")
    jobs = {}
    for e in entries:
        j = get(f"/v1/jobs/{e['job_id']}")
        jobs[e["key"]] = j
    wall = (ts(b["finished_at"]) - ts(b["created_at"])).total_seconds() if b.get("finished_at") else float("nan")
    return b, jobs, wall


def res(j):
    return j.get("result") or {}


def tot(jobs, field):
    return sum(int(res(j).get(field, 0) or 0) for j in jobs.values())


b1, j1, w1 = batch(FIRST)
b2, j2, w2 = batch(SECOND)
rep = get(f"/v1/batches/{SECOND}/report?baseline={FIRST}&format=json")
verdict = {e["key"]: e for e in rep["entries"]}

w = max([len(k) for k in j1] + [5])
print(f"   {'entry':{w}} {'1st s':>7} {'evals':>5} {'hits':>5} {'val':>4} | {'2nd s':>7} {'evals':>5} {'hits':>5} {'val':>4} {'warm':>4} | verdict")
for key in sorted(j1):
    a, b = res(j1[key]), res(j2.get(key, {}))
    ta = (a.get("timings") or {}).get("wall_s", 0)
    tb = (b.get("timings") or {}).get("wall_s", 0)
    warm = "yes" if (b.get("warm_start") or {}).get("used") else "no"
    v = verdict.get(key, {}).get("verdict", "?")
    print(f"   {key:{w}} {ta:7.1f} {a.get('evaluations', 0):5} {a.get('cache_hits', 0):5} {a.get('validations', 0):4} |"
          f" {tb:7.1f} {b.get('evaluations', 0):5} {b.get('cache_hits', 0):5} {b.get('validations', 0):4} {warm:>4} | {v}")

for name, b, jobs, wall in (("first", b1, j1, w1), ("second", b2, j2, w2)):
    print(f"   {name} batch {b['id']}: {b['n_jobs']} jobs, {b['counts']}, wall {wall:.1f} s, "
          f"{tot(jobs, 'evaluations')} evaluations, {tot(jobs, 'cache_hits')} cache hits, "
          f"{tot(jobs, 'validations')} validations, {tot(jobs, 'iterations')} iterations")
ratio = w2 / w1 if w1 > 0 else float("nan")
summ = rep["summary"]
others = {k: v for k, v in summ.items() if k != "unchanged" and v}
print(f"   second/first wall time: {ratio:.3f} (target <= 0.10)")
print(f"   report of the second against the first: {summ} (target: all {len(j1)} unchanged)")
ok = ratio <= 0.10 and not others and summ.get("unchanged") == len(j1)
sys.exit(0 if ok else 1)
