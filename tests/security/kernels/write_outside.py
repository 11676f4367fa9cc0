"""Attack: write outside the work folder.  In the decoy folders the test
planted (a worker spool, a kernels folder, a binaries folder, the folder of
the secrets) a file is created and left for the test to find; in kforge's
real folders (the kernel library, the binaries) a file is created and
removed again at once and existing files are opened for appending without
writing.  A file is also written to /tmp: only the test can tell whether it
reached the machine's /tmp or the sandbox's own."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    name = "sectest-pwned-%d" % os.getpid()
    for d in CONFIG["decoy_dirs"]:
        try:
            with open(os.path.join(d, name), "w") as f:
                f.write("PWNED")
            R.leak("wrote %s/%s" % (d, name))
        except OSError as ex:
            R.note("%s %s" % (os.path.basename(d), oserr(ex)))
    for d in CONFIG["real_dirs"]:
        p = os.path.join(d, name)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.close(fd)
            os.unlink(p)
            R.leak("created a file in %s" % d)
        except OSError as ex:
            R.note("%s %s" % (os.path.basename(d), oserr(ex)))
    for p in CONFIG["real_files"]:
        try:
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            os.close(fd)
            R.leak("opened %s for writing" % p)
        except OSError as ex:
            R.note("%s %s" % (os.path.basename(p), oserr(ex)))
    try:
        with open(os.path.join("/tmp", CONFIG["tmp_name"]), "w") as f:
            f.write("PWNED")
        R.note("wrote /tmp/" + CONFIG["tmp_name"])
    except OSError as ex:
        R.note("/tmp " + oserr(ex))
    R.finish()
