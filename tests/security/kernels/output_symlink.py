"""Attack (kforge-sim only): plant a symlink where kforge-sim, outside the
sandbox, will write the kernel's output (out0.npy in --output-dir), pointing
at a file outside, then return normally: the unsandboxed parent would
overwrite that file for the kernel.  The kernel
ends without a marker (it must return an output to be written); the test
checks the target file and that kforge-sim succeeded."""
# @@PRELUDE@@
import nki.isa as nisa


@nki.jit
def kernel(x):
    p = os.path.join(CONFIG["output_dir"], "out0.npy")
    try:
        if os.path.lexists(p):
            os.unlink(p)
        os.symlink(CONFIG["target_file"], p)
    except OSError:
        pass
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
