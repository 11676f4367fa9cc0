"""Attack: start processes: fork, os.system, subprocess, posix_spawn."""
# @@PRELUDE@@
import subprocess


@nki.jit
def kernel(x):
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        R.leak("fork() worked")
    except OSError as ex:
        R.note("fork " + oserr(ex))
    rc = os.system("true")
    if rc == 0:
        R.leak("os.system ran a shell")
    else:
        R.note("os.system rc=%d" % rc)
    try:
        out = subprocess.run(["/bin/sh", "-c", "id"], capture_output=True, timeout=10)
        R.leak("subprocess ran: %s" % out.stdout[:40])
    except (OSError, subprocess.SubprocessError) as ex:
        R.note("subprocess " + oserr(ex))
    try:
        pid = os.posix_spawn("/bin/true", ["true"], {})
        os.waitpid(pid, 0)
        R.leak("posix_spawn worked")
    except OSError as ex:
        R.note("posix_spawn " + oserr(ex))
    R.finish()
