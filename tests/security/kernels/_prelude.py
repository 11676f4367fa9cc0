# Shared by every hostile kernel in tests/security/kernels/: the test puts this
# file where the kernel says "# @@PRELUDE@@" and fills CONFIG in, then runs the
# kernel through kforge-sim and through a worker.  A kernel ends with
# R.finish(), which raises a RuntimeError so that its message reaches the
# caller in the evaluation's error: the LEAK marker and what it got if any
# attempt got something out of the sandbox, else the DENIED marker and why
# each attempt failed (with errno).  The markers are built at run time, so
# that only a kernel that ran can put them in what comes back (the source
# itself is in the job's record).
import ctypes
import errno as _errno
import os
import platform
import re

import nki
import nki.language as nl

# pids, paths and ports of the world outside the sandbox (see sec_lib.c)
CONFIG = @@CONFIG@@

# syscall numbers: (x86_64, aarch64)
_NR = {
    "socket": (41, 198), "connect": (42, 203), "kill": (62, 129),
    "ptrace": (101, 117), "getuid": (102, 174), "capget": (125, 90),
    "mount": (165, 40), "umount2": (166, 39), "keyctl": (250, 219),
    "unshare": (272, 97), "perf_event_open": (298, 241), "setns": (308, 268),
    "process_vm_readv": (310, 270), "bpf": (321, 280), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "pidfd_open": (434, 434), "pidfd_getfd": (438, 438),
}
_ARCH = 0 if platform.machine() in ("x86_64", "amd64") else 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def sys_call(name, *args):
    """Raw syscall by name; returns (result, errno)."""
    conv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(_NR[name][_ARCH]), *conv)
    return r, (ctypes.get_errno() if r < 0 else 0)


def ename(e):
    return _errno.errorcode.get(e, str(e))


def oserr(ex):
    return ename(ex.errno) if getattr(ex, "errno", None) else type(ex).__name__


# What a secret looks like: the markers the tests plant, KFORGE_*TOKEN=...
# environment strings, kforge API tokens.
_NEEDLES = [re.compile(rb"KFSECRET-[0-9a-f]{32}"),
            re.compile(rb"KFORGE_[A-Z_]*TOKEN=[^\x00\s]{6,}"),
            re.compile(rb"kf_[0-9a-f]{64}")]


def find_secret(data):
    if isinstance(data, str):
        data = data.encode("latin-1", "replace")
    for rx in _NEEDLES:
        m = rx.search(data)
        if m:
            return m.group(0)[:120].decode("latin-1")
    return None


_LEAK = "LE" + "AK:"
_DENIED = "DEN" + "IED:"


class Report:
    def __init__(self):
        self.leaks = []
        self.notes = []

    def leak(self, what):
        self.leaks.append(str(what))

    def note(self, what):
        self.notes.append(str(what))

    def finish(self):
        if self.leaks:
            raise RuntimeError(_LEAK + "; ".join(self.leaks)[:300])
        raise RuntimeError(_DENIED + "; ".join(self.notes)[:300])


R = Report()


def own_pid_ns():
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def same_pid_ns():
    """True when this process shares the pid namespace of the test (outside)."""
    return own_pid_ns() == CONFIG["host_pidns"]


def outside_pids():
    """Pids of processes outside the sandbox: the planted victims, and the
    parent when it is in the outer pid namespace (getppid() is 0 when the
    parent is outside our own pid namespace)."""
    pids = list(CONFIG["victims"])
    pp = os.getppid()
    if pp > 0 and same_pid_ns() and pp not in pids:
        pids.insert(0, pp)
    return pids


def read_file(path, limit=1 << 16):
    with open(path, "rb") as f:
        return f.read(limit)


def scan_memory(pid, budget=1 << 31):
    """Reads every readable mapping of pid through /proc/PID/mem and looks
    for a secret.  Returns (found or None, note)."""
    try:
        maps = read_file("/proc/%s/maps" % pid, 1 << 24).decode("latin-1")
    except OSError as ex:
        return None, "maps of %s: %s" % (pid, oserr(ex))
    try:
        fd = os.open("/proc/%s/mem" % pid, os.O_RDONLY)
    except OSError as ex:
        return None, "mem of %s: %s" % (pid, oserr(ex))
    scanned = 0
    errors = {}
    try:
        for line in maps.splitlines():
            parts = line.split()
            if len(parts) < 2 or "r" not in parts[1]:
                continue
            if len(parts) > 5 and parts[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if hi - lo > (256 << 20):          # sanitizer shadow and reserves
                continue
            off = lo
            while off < hi and scanned < budget:
                n = min(4 << 20, hi - off)
                try:
                    chunk = os.pread(fd, n, off)
                except OSError as ex:
                    errors[ename(ex.errno)] = errors.get(ename(ex.errno), 0) + 1
                    break
                scanned += len(chunk)
                s = find_secret(chunk)
                if s:
                    return s, "found in memory of %s at %#x" % (pid, off)
                if len(chunk) < n or off + n >= hi:
                    break
                off += n - 256                     # overlap: a secret across chunks
    finally:
        os.close(fd)
    return None, "scanned %d MiB of %s, no secret (read errors %s)" % (scanned >> 20, pid, errors or "none")


def scan_args_env():
    """Without /proc: the argument and environment strings at the top of the
    stack, from argv[0] (program_invocation_name) to AT_EXECFN."""
    try:
        _libc.getauxval.restype = ctypes.c_ulong
        execfn = _libc.getauxval(ctypes.c_ulong(31))
        start = ctypes.c_void_p.in_dll(_libc, "program_invocation_name").value
        if not execfn or not start or not (0 < execfn - start < (8 << 20)):
            return None, "no argv/env block found"
        end = execfn + len(ctypes.string_at(execfn)) + 1
        return find_secret(ctypes.string_at(start, end - start)), "argv/env block of %d bytes" % (end - start)
    except Exception as ex:  # noqa: BLE001 - any failure is a failed attempt
        return None, "argv/env block: %s" % type(ex).__name__


def work_dir():
    """A folder the evaluation may write: its own work folder."""
    for d in (os.environ.get("TMPDIR"), os.getcwd(), "/tmp"):
        if d and os.access(d, os.W_OK):
            return d
    return None
