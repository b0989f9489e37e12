#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""free_port.py HOST: print a free TCP port P on HOST whose SDP port
(P + 20000, where the software transport listens) is free too, for
programs that take a fixed port number.  Exit 1 if none is found."""
import random
import socket
import sys


def free(host, port):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
for _ in range(500):
    p = random.randint(20000, 40000)
    if free(host, p) and free(host, p + 20000):
        print(p)
        sys.exit(0)
sys.exit(1)
