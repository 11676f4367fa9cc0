"""Attack: the kernel keyring (keyctl): read the session keyring, join a new
one.  Keys of other processes of the same user would be in reach."""
# @@PRELUDE@@

KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING = 0, 1
KEY_SPEC_USER_KEYRING = -4


@nki.jit
def kernel(x):
    r, e = sys_call("keyctl", KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0)
    if r >= 0:
        R.leak("keyctl(GET_KEYRING_ID, user keyring) = %d" % r)
    else:
        R.note("GET_KEYRING_ID %s" % ename(e))
    r, e = sys_call("keyctl", KEYCTL_JOIN_SESSION_KEYRING, None)
    if r >= 0:
        R.leak("keyctl(JOIN_SESSION_KEYRING) = %d" % r)
    else:
        R.note("JOIN_SESSION_KEYRING %s" % ename(e))
    R.finish()
