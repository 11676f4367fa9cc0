"""Attack: read secrets from the evaluation's environment (os.environ and
/proc/self/environ).  Nothing named KFORGE_* and no planted secret may be
there."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    bad = sorted(k for k in os.environ if k.startswith("KFORGE_"))
    if bad:
        R.leak("KFORGE_* variables in os.environ: %s" % ",".join(bad))
    for k, v in os.environ.items():
        s = find_secret("%s=%s" % (k, v))
        if s:
            R.leak("os.environ[%s]: %s" % (k, s))
    try:
        s = find_secret(read_file("/proc/self/environ"))
        if s:
            R.leak("/proc/self/environ: " + s)
        R.note("/proc/self/environ has no secret")
    except OSError as ex:
        R.note("/proc/self/environ: " + oserr(ex))
    R.note("%d variables, none secret" % len(os.environ))
    R.finish()
