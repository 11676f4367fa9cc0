"""Attack: fill the disk from the work folder: a write at a 16 GiB offset,
then up to 2 GiB of real data.  RLIMIT_FSIZE (EFBIG) or the work folder's
size (ENOSPC) must stop it.  The file is removed at the end."""
# @@PRELUDE@@
import signal


@nki.jit
def kernel(x):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # EFBIG instead of a signal
    wd = work_dir()
    if not wd:
        R.note("no writable work folder")
        R.finish()
    path = os.path.join(wd, "sectest-huge-%d" % os.getpid())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            os.pwrite(fd, b"x", 16 << 30)
            R.leak("wrote at a 16 GiB offset: no file size limit")
        except OSError as ex:
            R.note("16 GiB offset %s" % oserr(ex))
        if not R.leaks:
            os.ftruncate(fd, 0)
            chunk, done = b"\0" * (8 << 20), 0
            try:
                while done < (2 << 30):
                    done += os.pwrite(fd, chunk, done)
                R.leak("wrote 2 GiB into the work folder")
            except OSError as ex:
                R.note("stopped after %d MiB: %s" % (done >> 20, oserr(ex)))
    finally:
        os.close(fd)
        os.unlink(path)
    R.finish()
