"""Attack: perf_event_open() (counters on this process, then on every CPU):
a side channel and a long history of kernel bugs."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    attr = ctypes.create_string_buffer(128)
    # type PERF_TYPE_SOFTWARE(1), size 128, config PERF_COUNT_SW_CPU_CLOCK(0)
    ctypes.memmove(attr, (ctypes.c_uint32 * 2)(1, 128), 8)
    for what, pid, cpu in (("self", 0, -1), ("cpu0", -1, 0)):
        r, e = sys_call("perf_event_open", attr, pid, cpu, -1, 0)
        if r >= 0:
            R.leak("perf_event_open(%s) gave fd %d" % (what, r))
            os.close(r)
        else:
            R.note("perf %s %s" % (what, ename(e)))
    R.finish()
