"""Attack: use file descriptors inherited from the worker or kforge-sim.
Every open descriptor is listed (/proc/self/fd, else probed with fstat) and
judged by what it reaches: a network socket or a listening socket (the
worker's Redis and API connections, a server's socket), a process handle
(pidfd), a file open for writing, a file holding a secret, or a folder
other than the evaluation's own (a way around its filesystem view) is a
leak.  Pipes, character devices, connected Unix sockets and stdout and
stderr can be the sandbox's own channels (output, results): nothing is
written on them."""
# @@PRELUDE@@
import fcntl
import socket
import stat


def _own_dirs():
    ids = set()
    for d in (os.getcwd(), os.environ.get("TMPDIR"), "/tmp", work_dir()):
        try:
            st = os.stat(d)
            ids.add((st.st_dev, st.st_ino))
        except (OSError, TypeError):
            pass
    return ids


def _flags(fd):
    try:
        for line in read_file("/proc/self/fdinfo/%d" % fd).decode().splitlines():
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return fcntl.fcntl(fd, fcntl.F_GETFL)


@nki.jit
def kernel(x):
    try:
        fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
    except OSError as ex:
        R.note("/proc/self/fd " + oserr(ex))
        fds = list(range(0, 1024))
    own = _own_dirs()
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
        elif stat.S_ISSOCK(m):
            s = socket.socket(fileno=os.dup(fd))
            try:
                fam = s.family
                listening = s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            except OSError as ex:
                fam, listening = None, 0
                R.note("fd %d socket %s" % (fd, oserr(ex)))
            finally:
                s.close()
            if fam != socket.AF_UNIX:
                R.leak("fd %d is a network socket (%s, family %s)" % (fd, target, fam))
            elif listening:
                R.leak("fd %d is a listening Unix socket (%s)" % (fd, target))
            else:
                kinds.append("%d:unix" % fd)
        elif stat.S_ISDIR(m):
            if (st.st_dev, st.st_ino) in own:
                kinds.append("%d:own dir" % fd)
            else:
                R.leak("fd %d is a folder outside the work folder (%s)" % (fd, target))
        elif stat.S_ISREG(m):
            acc = _flags(fd) & 3
            s = None
            try:
                s = find_secret(os.pread(fd, 1 << 20, 0))
            except OSError:
                pass
            if acc != os.O_RDONLY and fd > 2:          # stdout, stderr may go to a log file
                R.leak("fd %d is a file open for writing (%s)" % (fd, target))
            elif s:
                R.leak("fd %d holds a secret (%s): %s" % (fd, target, s))
            else:
                kinds.append("%d:ro file" % fd)
        elif "pidfd" in target:
            R.leak("fd %d is a process handle (%s)" % (fd, target))
        else:
            kinds.append("%d:%s" % (fd, target[:20]))
    R.note("fds: " + " ".join(kinds))
    R.finish()
