"""Attack: read the worker's token file, the admin token file and a secret
file that the worker's user can read, by their absolute paths and relative
to the working folder."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    paths = list(CONFIG["secret_files"]) + ["var/worker-token", "var/admin-token", "var/kforge.env"]
    for p in paths:
        try:
            data = read_file(p)
            R.leak("read %s: %s" % (p, find_secret(data) or data[:40]))
        except OSError as ex:
            R.note("%s %s" % (os.path.basename(p), oserr(ex)))
    R.finish()
