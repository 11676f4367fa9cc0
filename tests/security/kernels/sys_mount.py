"""Attack: mount() a tmpfs (and bind-mount /) inside the work folder, which
would let the kernel rearrange its view of the filesystem."""
# @@PRELUDE@@

MS_BIND, MNT_DETACH = 4096, 2


@nki.jit
def kernel(x):
    wd = work_dir() or "/tmp"
    target = os.path.join(wd, "sectest-mnt-%d" % os.getpid())
    try:
        os.mkdir(target)
    except OSError as ex:
        R.note("mkdir %s" % oserr(ex))
        target = wd
    try:
        for what, src, fs, flags in (("tmpfs", b"none", b"tmpfs", 0), ("bind /", b"/", None, MS_BIND)):
            r, e = sys_call("mount", ctypes.c_char_p(src), ctypes.c_char_p(target.encode()),
                            ctypes.c_char_p(fs) if fs else None, flags, None)
            if r == 0:
                R.leak("mount(%s)" % what)
                sys_call("umount2", ctypes.c_char_p(target.encode()), MNT_DETACH)
            else:
                R.note("mount %s %s" % (what, ename(e)))
    finally:
        if target != wd:
            try:
                os.rmdir(target)
            except OSError:
                pass
    R.finish()
