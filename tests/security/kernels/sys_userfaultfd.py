"""Attack: userfaultfd() (a classic tool to win kernel races)."""
# @@PRELUDE@@

O_CLOEXEC, UFFD_USER_MODE_ONLY = 0o2000000, 1


@nki.jit
def kernel(x):
    for what, flags in (("user-mode", O_CLOEXEC | UFFD_USER_MODE_ONLY), ("plain", O_CLOEXEC)):
        r, e = sys_call("userfaultfd", flags)
        if r >= 0:
            R.leak("userfaultfd(%s) gave fd %d" % (what, r))
            os.close(r)
        else:
            R.note("%s %s" % (what, ename(e)))
    R.finish()
