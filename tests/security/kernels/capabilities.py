"""Attack surface check: the evaluation must hold no capability (CapEff and
CapPrm 0), have NoNewPrivs set, and run under a seccomp filter, per
/proc/self/status and, without /proc, capget() and prctl()."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    status = {}
    try:
        for line in read_file("/proc/self/status").decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            status[k] = v.strip()
    except OSError as ex:
        R.note("/proc/self/status " + oserr(ex))
    if status:
        for k in ("CapEff", "CapPrm", "CapAmb"):
            if int(status.get(k, "0"), 16) != 0:
                R.leak("%s=%s" % (k, status[k]))
        if status.get("NoNewPrivs") != "1":
            R.leak("NoNewPrivs=%s" % status.get("NoNewPrivs"))
        if status.get("Seccomp") != "2":
            R.leak("Seccomp=%s" % status.get("Seccomp"))
        R.note("CapEff=%s NoNewPrivs=%s Seccomp=%s" % (status.get("CapEff"), status.get("NoNewPrivs"),
                                                      status.get("Seccomp")))
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)             # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    r, e = sys_call("capget", hdr, data)
    if r == 0:
        eff = data[0] | (data[3] << 32)
        if eff:
            R.leak("capget: effective %#x" % eff)
    else:
        R.note("capget " + ename(e))
    _libc.prctl.restype = ctypes.c_int
    nnp = _libc.prctl(39, 0, 0, 0, 0)                      # PR_GET_NO_NEW_PRIVS
    if nnp != 1:
        R.leak("PR_GET_NO_NEW_PRIVS=%d" % nnp)
    R.finish()
