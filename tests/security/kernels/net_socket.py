"""Attack: open network sockets (AF_INET, AF_INET6, AF_NETLINK, AF_PACKET)
and connect to the API, Redis and PostgreSQL on loopback.  Only AF_UNIX
sockets may be created."""
# @@PRELUDE@@
import socket


@nki.jit
def kernel(x):
    for fam, name, typ, proto in ((socket.AF_INET, "AF_INET", socket.SOCK_STREAM, 0),
                                  (socket.AF_INET6, "AF_INET6", socket.SOCK_STREAM, 0),
                                  (socket.AF_NETLINK, "AF_NETLINK", socket.SOCK_RAW, 0),
                                  (socket.AF_PACKET, "AF_PACKET", socket.SOCK_RAW, 0)):
        try:
            s = socket.socket(fam, typ, proto)
        except OSError as ex:
            R.note("socket(%s) %s" % (name, oserr(ex)))
            continue
        R.leak("socket(%s) created" % name)
        if fam == socket.AF_INET:
            s.settimeout(2)
            for port in CONFIG["ports"]:
                try:
                    s2 = socket.create_connection(("127.0.0.1", port), timeout=2)
                    s2.close()
                    R.leak("connected to 127.0.0.1:%d" % port)
                except OSError as ex:
                    R.note("connect %d %s" % (port, oserr(ex)))
        s.close()
    R.finish()
