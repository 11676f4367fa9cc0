"""Attack: bpf(BPF_MAP_CREATE) and bpf(BPF_PROG_LOAD): the kernel's BPF is
attack surface a sandbox has no use for."""
# @@PRELUDE@@


@nki.jit
def kernel(x):
    attr = ctypes.create_string_buffer(128)
    # BPF_MAP_CREATE: map_type ARRAY(2), key_size 4, value_size 4, max_entries 1
    ctypes.memmove(attr, (ctypes.c_uint32 * 4)(2, 4, 4, 1), 16)
    r, e = sys_call("bpf", 0, attr, 128)
    if r >= 0:
        R.leak("bpf(BPF_MAP_CREATE) gave fd %d" % r)
        os.close(r)
    else:
        R.note("BPF_MAP_CREATE %s" % ename(e))
    # BPF_PROG_LOAD of "r0 = 0; exit" as a socket filter (type 1)
    insns = (ctypes.c_uint64 * 2)(0xb7, 0x95)
    lic = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(128)
    ctypes.memmove(attr, (ctypes.c_uint32 * 2)(1, 2), 8)
    ctypes.memmove(ctypes.addressof(attr) + 8, (ctypes.c_uint64 * 2)(ctypes.addressof(insns),
                                                                       ctypes.addressof(lic)), 16)
    r, e = sys_call("bpf", 5, attr, 128)
    if r >= 0:
        R.leak("bpf(BPF_PROG_LOAD) gave fd %d" % r)
        os.close(r)
    else:
        R.note("BPF_PROG_LOAD %s" % ename(e))
    R.finish()
