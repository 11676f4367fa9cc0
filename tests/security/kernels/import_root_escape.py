"""Attack: through an import root (kforge-sim run --path), which the sandbox
shows read-only, reach what lies beside it: the secret files through the
absolute and relative symbolic links the root holds, the root's parent
folder, and a write into the root.  The root itself must be there (its
module imports), or the kernel stops without a marker and the test fails."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "importroot")
    import rootmod  # noqa: F401  (fails, and so does the test, when the root is not shown)
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if not os.path.islink(p):
            continue
        try:
            R.leak("read %s through %s: %s" % (os.readlink(p), p, find_secret(read_file(p)) or "?"))
        except OSError as ex:
            R.note("link %s %s" % (name, oserr(ex)))
    parent = os.path.dirname(root)
    try:
        seen = sorted(set(os.listdir(parent)) - {"importroot", "kernel.py", os.path.basename(os.getcwd())})
        if seen:
            R.leak("listed %s beside the root: %s" % (parent, seen))
        else:
            R.note("the root's parent shows the root and the kernel only")
    except OSError as ex:
        R.note("listing the parent %s" % oserr(ex))
    try:
        with open(os.path.join(root, "planted.py"), "w") as f:
            f.write("PWNED")
        R.leak("wrote into the import root")
    except OSError as ex:
        R.note("write into the root %s" % oserr(ex))
    R.finish()
