"""Attack: connect to Unix sockets outside the sandbox: PostgreSQL's (which
trusts local connections in the tests), and the usual container runtimes'."""
# @@PRELUDE@@
import socket


@nki.jit
def kernel(x):
    paths = list(CONFIG["unix_sockets"]) + ["/var/run/docker.sock", "/run/containerd/containerd.sock",
                                            "/run/dbus/system_bus_socket"]
    for p in paths:
        try:
            # the sandbox may refuse the socket itself, not only the connect
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as ex:
            R.note("socket(AF_UNIX) %s" % oserr(ex))
            continue
        s.settimeout(2)
        try:
            s.connect(p)
            R.leak("connected to %s" % p)
        except OSError as ex:
            R.note("%s %s" % (os.path.basename(p), oserr(ex)))
        finally:
            s.close()
    R.finish()
