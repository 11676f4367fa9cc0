"""Attack: unshare() new namespaces (user, mount, UTS, IPC, network, pid):
the seccomp allowlist must deny unshare."""
# @@PRELUDE@@

FLAGS = (("NEWUSER", 0x10000000), ("NEWNS", 0x00020000), ("NEWUTS", 0x04000000),
         ("NEWIPC", 0x08000000), ("NEWNET", 0x40000000), ("NEWPID", 0x20000000))


@nki.jit
def kernel(x):
    for name, flag in FLAGS:
        r, e = sys_call("unshare", flag)
        if r == 0:
            R.leak("unshare(CLONE_%s)" % name)
        else:
            R.note("%s %s" % (name, ename(e)))
    R.finish()
