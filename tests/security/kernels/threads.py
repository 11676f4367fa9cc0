"""Attack: start thousands of threads (RLIMIT_NPROC must stop it well before
2048)."""
# @@PRELUDE@@
import threading


@nki.jit
def kernel(x):
    threading.stack_size(256 << 10)
    stop = threading.Event()
    started = []
    err = None
    try:
        while len(started) < 2048:
            t = threading.Thread(target=stop.wait)
            t.start()
            started.append(t)
    except (RuntimeError, OSError, MemoryError) as ex:
        err = "%s %s" % (type(ex).__name__, ex)
    stop.set()
    for t in started:
        t.join()
    if err is None:
        R.leak("started %d threads" % len(started))
    else:
        R.note("stopped at %d threads: %s" % (len(started), err[:60]))
    R.finish()
