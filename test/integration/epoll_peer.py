#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
# An epoll program for faults.sh, run under the preload: the peer of each
# connection is killed (kill -9) at a random point, and this side must see
# it through epoll and the error TCP gives, keep every byte it got intact,
# and go on.
#
#   epoll_peer.py server HOST PORTFILE   serve for ever: each connection's
#       first byte says whether the server reads it ("R") or writes it
#       ("W"), waiting in epoll each time; one line per connection:
#       "conn N read|write: END after B bytes, intact" (END: EOF, or the
#       errno's name), or "... CORRUPT at byte B"
#   epoll_peer.py client HOST PORT MODE [BYTES]  MODE send: stream BYTES
#       (default: for ever) then close; MODE recv: read and check for ever
#
# Byte i of every stream is (i * 7 + i // 4099) % 251.
import errno
import os
import select
import socket
import sys


# The stream repeats every PERIOD bytes: one period, twice over, is sliced.
PERIOD = 251 * 4099
TABLE = bytes((i * 7 + i // 4099) % 251 for i in range(PERIOD)) * 2


def pattern(off, n):
    out = b""
    while n:
        k = min(n, PERIOD)
        out += TABLE[off % PERIOD:off % PERIOD + k]
        off += k
        n -= k
    return out


def check(off, data):
    want = pattern(off, len(data))
    if data == want:
        return -1
    return off + next(i for i in range(len(data)) if data[i] != want[i])


def serve(host, portfile):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind((host, 0))
    ls.listen(8)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    n = 0
    while True:
        c, _ = ls.accept()
        c.setblocking(False)
        ep = select.epoll()
        ep.register(c.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
        mode, off, end, bad = None, 0, None, -1
        while end is None:
            if not ep.poll():
                continue
            try:
                if mode is None:
                    b = c.recv(1)
                    if not b:
                        end = "EOF"
                        mode = b"?"
                    else:
                        mode = b
                        if mode == b"W":
                            ep.modify(c.fileno(), select.EPOLLOUT | select.EPOLLRDHUP)
                elif mode == b"R":
                    data = c.recv(65536)
                    if not data:
                        end = "EOF"
                    elif bad < 0:
                        bad = check(off, data)
                    off += len(data)
                else:
                    off += c.send(pattern(off, 65536))
            except BlockingIOError:
                pass
            except OSError as e:
                end = errno.errorcode.get(e.errno, str(e.errno))
        ep.close()
        c.close()
        what = {b"R": "read", b"W": "write"}.get(mode, "header")
        print("conn %d %s: %s after %d bytes, %s" %
              (n, what, end, off, "intact" if bad < 0 else "CORRUPT at byte %d" % bad),
              flush=True)
        n += 1


def client(host, port, mode, nbytes):
    c = socket.create_connection((host, port))
    c.sendall(b"R" if mode == "send" else b"W")
    off = 0
    if mode == "send":
        while nbytes is None or off < nbytes:
            n = 65536 if nbytes is None else min(65536, nbytes - off)
            c.sendall(pattern(off, n))
            off += n
        c.close()
        return 0
    while True:
        data = c.recv(65536)
        if not data:
            return 0
        if check(off, data) >= 0:
            print("client: CORRUPT at byte %d" % check(off, data), flush=True)
            return 1
        off += len(data)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2], sys.argv[3])
    else:
        sys.exit(client(sys.argv[2], int(sys.argv[3]), sys.argv[4],
                        int(sys.argv[5]) if len(sys.argv) > 5 else None))
