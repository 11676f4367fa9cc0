"""Attack surface check: the evaluation must run neither as the worker's
user nor as root.  Inside a user namespace the ids are translated to the
outer ones through /proc/self/uid_map and gid_map."""
# @@PRELUDE@@


def _outer(kind, inner):
    try:
        for line in read_file("/proc/self/%s_map" % kind).decode().splitlines():
            a, b, n = (int(v) for v in line.split())
            if a <= inner < a + n:
                return b + inner - a
        return None                              # unmapped: the overflow id
    except OSError:
        return inner


@nki.jit
def kernel(x):
    ids = {"uid": _outer("uid", os.getuid()), "euid": _outer("uid", os.geteuid()),
           "gid": _outer("gid", os.getgid()), "egid": _outer("gid", os.getegid())}
    for k in ("uid", "euid"):
        if ids[k] == CONFIG["worker_uid"]:
            R.leak("%s %d is the worker's" % (k, ids[k]))
        elif ids[k] == 0:
            R.leak("%s 0 is root" % k)
    for k in ("gid", "egid"):
        if ids[k] == CONFIG["worker_gid"]:
            R.leak("%s %d is the worker's" % (k, ids[k]))
    R.note("outer ids " + " ".join("%s=%s" % kv for kv in sorted(ids.items())))
    R.finish()
