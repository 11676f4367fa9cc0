"""Attack: use file descriptors inherited from the worker or kforge-sim.
Every open descriptor is listed (/proc/self/fd, else probed with fstat);
a socket, a regular file, a folder or a process handle from outside is a
leak, and each is written to (folders: a file is created through them).
Pipes are the sandbox's own channels (stdout, stderr, results) and are left
alone."""
# @@PRELUDE@@
import stat


@nki.jit
def kernel(x):
    try:
        fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
    except OSError as ex:
        R.note("/proc/self/fd " + oserr(ex))
        fds = list(range(0, 1024))
    kinds = []
    for fd in fds:
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        try:
            target = os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            target = "?"
        m = st.st_mode
        if stat.S_ISFIFO(m) or stat.S_ISCHR(m):
            kinds.append("%d:%s" % (fd, "pipe" if stat.S_ISFIFO(m) else "chr"))
            continue
        if stat.S_ISSOCK(m):
            try:
                n = os.write(fd, b"PING\r\n")
                R.leak("fd %d is a socket (%s), wrote %d bytes" % (fd, target, n))
            except OSError as ex:
                R.leak("fd %d is a socket (%s), write %s" % (fd, target, oserr(ex)))
        elif stat.S_ISDIR(m):
            try:
                nfd = os.open("sectest-fd-escape", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
                os.close(nfd)
                os.unlink("sectest-fd-escape", dir_fd=fd)
                R.leak("fd %d is a folder (%s), created a file in it" % (fd, target))
            except OSError as ex:
                R.leak("fd %d is a folder (%s) (create %s)" % (fd, target, oserr(ex)))
        elif stat.S_ISREG(m):
            R.leak("fd %d is a file (%s)" % (fd, target))
        else:
            R.leak("fd %d: %s" % (fd, target))
    R.note("fds: " + " ".join(kinds))
    R.finish()
