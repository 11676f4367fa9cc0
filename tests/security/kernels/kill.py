"""Attack: signal processes outside the sandbox: the victims, the parent and
pid 1 when they share our pid namespace.  SIGCONT is used: delivered, it
proves the sandbox could have killed them, and it harms nothing."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    targets = outside_pids()
    if same_pid_ns() and 1 not in targets:
        targets.append(1)
    for pid in targets:
        r, e = sys_call("kill", pid, 18)
        if r == 0:
            R.leak("kill(%d, SIGCONT) delivered" % pid)
        else:
            R.note("kill %d %s" % (pid, ename(e)))
    # and everything this process can see, when that is the outside world
    if same_pid_ns():
        r, e = sys_call("kill", -1, 0)
        if r == 0:
            R.leak("kill(-1, 0) reaches other processes")
    R.finish()
