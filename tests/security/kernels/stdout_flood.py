"""Attack: flood stdout and stderr with 64 MiB.  The caller must keep only
a bounded tail (the test checks what kforge-sim prints and what the job
keeps); the kernel itself cannot tell, so it ends with DENIED."""
# @@PRELUDE@@
import sys


@nki.jit
def kernel(x):
    line = b"FLOOD " * 170 + b"\n"
    n = 0
    try:
        while n < (64 << 20):
            n += os.write(1 if n & (1 << 20) else 2, line)
        R.note("flooded %d MiB" % (n >> 20))
    except OSError as ex:
        R.note("flood stopped after %d MiB: %s" % (n >> 20, oserr(ex)))
    sys.stdout.flush()
    R.finish()
