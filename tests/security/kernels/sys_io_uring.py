"""Attack: io_uring_setup(): io_uring performs socket and file operations
that a seccomp filter never sees."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    params = ctypes.create_string_buffer(120)
    r, e = sys_call("io_uring_setup", 4, params)
    if r >= 0:
        R.leak("io_uring_setup gave fd %d" % r)
        os.close(r)
    else:
        R.note("io_uring_setup %s" % ename(e))
    R.finish()
