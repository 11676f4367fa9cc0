"""Attack: look for the worker's secrets in the evaluation's OWN memory
(/proc/self/maps + /proc/self/mem, and the argv/environment block at the top
of the stack through ctypes).  Finds them when the sandbox forked from a
process that held them instead of starting a clean image."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    s, note = scan_args_env()
    if s:
        R.leak(note + ": " + s)
    else:
        R.note(note + ": no secret")
    s, note = scan_memory("self")
    if s:
        R.leak(note + ": " + s)
    else:
        R.note(note)
    R.finish()
