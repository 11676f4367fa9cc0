"""Stand-in of `nki.language`: the names a kernel's module touches when it is
imported (the body of an @nki.jit kernel runs in kforge-sim, never here)."""


def __getattr__(name):
    # nl.float32, nl.shared_hbm, nl.add, ...: opaque placeholders
    return "nki.language." + name
