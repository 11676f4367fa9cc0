"""Attack (worker only, as an optimize job): replace the kernel's own source
file, in the worker's folder for the job, by a symlink to the worker's token
file, and return a correct output.  The worker reads the source again after
the evaluations (the best kernel's source in the result, the next
candidate): an unsandboxed worker reads the token for the kernel and shows
it to the user.  The kernel has no marker (it must succeed); the test
checks that the job succeeded with a correct kernel and that no secret came
back."""
# @@PRELUDE@@
import sys

import nki.isa as nisa


@nki.jit
def kernel(x):
    p = os.path.abspath(sys._getframe().f_code.co_filename)
    try:
        os.rename(p, p + ".orig")
        os.symlink(CONFIG["secret_files"][0], p)
    except OSError:
        pass
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
