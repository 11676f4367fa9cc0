"""Attack: ptrace(PTRACE_SEIZE) and ptrace(PTRACE_ATTACH) the parent and the
victims (an attached tracer can read and write their memory).  A successful
ATTACH is undone at once so that the victim runs on."""
# @@PRELUDE@@

PTRACE_ATTACH, PTRACE_DETACH, PTRACE_SEIZE = 16, 17, 0x4206


@nki.jit
def kernel(x):
    for pid in outside_pids():
        r, e = sys_call("ptrace", PTRACE_SEIZE, pid, 0, 0)
        if r == 0:
            R.leak("PTRACE_SEIZE of %d" % pid)
            sys_call("ptrace", PTRACE_DETACH, pid, 0, 0)
        else:
            R.note("SEIZE %d %s" % (pid, ename(e)))
        r, e = sys_call("ptrace", PTRACE_ATTACH, pid, 0, 0)
        if r == 0:
            R.leak("PTRACE_ATTACH of %d" % pid)
            try:
                os.waitpid(pid, 0x40000000)          # __WALL: the attach stop
            except OSError:
                pass
            sys_call("ptrace", PTRACE_DETACH, pid, 0, 0)
            sys_call("kill", pid, 18)                # SIGCONT, in case
        else:
            R.note("ATTACH %d %s" % (pid, ename(e)))
    R.finish()
