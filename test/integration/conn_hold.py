#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""One end of test/integration/verbs_limits.sh and bench/conn_scale.sh:
hold many idle connections and report
what they cost this process (descriptors, pinned and locked memory).

  conn_hold.py server HOST PORTFILE N SECONDS
  conn_hold.py client HOST PORT N SECONDS

Each connection carries one byte each way, so that it is up on both ends.
The server stops accepting after N connections or SECONDS without a new one.
Prints "key=value" lines: before (no connection), first (one held: what
the first connection opens once per process is in it), after (all held), ok,
err.
With CONN_HOLD_BULK=K:MIB in the environment, once all are held the
client then sends MIB MiB on each of the first K connections in turn and
the server checks them (a pattern of the connection's number); both print
"bulk_ok=COUNT bulk_mbit=RATE" (the rate over all K, in Mbit/s), their
usage then ("bulk_..."), and again ("idle_..."): the client once its
pinned memory is back within 64 KiB a bulk connection of the "after"
figure (the send rings the bulk grew, given back when idle), or after
CONN_HOLD_IDLE seconds (20); the server at once.
Then both ends hold their connections for SECONDS, or until killed."""
import os
import socket
import sys
import time


def usage():
    fds = len(os.listdir('/proc/self/fd'))
    kb = {}
    with open('/proc/self/status') as f:
        for line in f:
            k, v = line.split(':', 1)
            if k in ('VmPin', 'VmLck', 'VmRSS'):
                kb[k] = int(v.split()[0])
    return fds, kb


def report(tag, u):
    fds, kb = u
    print(f"{tag}_fds={fds} {tag}_pin_kb={kb.get('VmPin', 0)} "
          f"{tag}_lck_kb={kb.get('VmLck', 0)} {tag}_rss_kb={kb.get('VmRSS', 0)}", flush=True)


def main():
    mode, host = sys.argv[1], sys.argv[2]
    n, secs = int(sys.argv[4]), float(sys.argv[5])
    held, err, first_err = [], 0, ''
    if mode == 'server':
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, 0))
        ls.listen(4096)
        report('before', usage())
        with open(sys.argv[3] + '.tmp', 'w') as f:
            f.write(str(ls.getsockname()[1]))
        os.rename(sys.argv[3] + '.tmp', sys.argv[3])
        ls.settimeout(secs)
        while len(held) < n:
            try:
                s, _ = ls.accept()
            except OSError as e:
                first_err = first_err or repr(e)
                break
            try:
                s.settimeout(secs)
                if s.recv(1) != b'x':
                    raise OSError('no byte')
                s.sendall(b'y')
                held.append(s)
                if len(held) == 1:
                    report('first', usage())
            except OSError as e:
                err += 1
                first_err = first_err or repr(e)
                s.close()
    else:
        port = int(sys.argv[3])
        report('before', usage())
        t0 = time.monotonic()
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(secs)
            try:
                s.connect((host, port))
                s.sendall(b'x')
                if s.recv(1) != b'y':
                    raise OSError('no byte')
                held.append(s)
                if len(held) == 1:
                    report('first', usage())
            except OSError as e:
                err += 1
                first_err = first_err or repr(e)
                s.close()
                if err >= 5:
                    break
        print(f"setup_ms={int((time.monotonic() - t0) * 1000)}", flush=True)
    u = usage()
    report('after', u)
    after_pin = u[1].get('VmPin', 0)
    bulk = os.environ.get('CONN_HOLD_BULK')
    if bulk and held:
        k, mib = (int(x) for x in bulk.split(':'))
        bulk_ok, t0, chunk = 0, time.monotonic(), 1 << 16
        for i, s in enumerate(held[:k]):
            pat = bytes((i + j) % 251 for j in range(251)) * (chunk // 251 + 2)
            try:
                left = mib << 20
                if mode == 'client':
                    while left:
                        n = min(left, chunk)
                        s.sendall(pat[left % 251:left % 251 + n])
                        left -= n
                else:
                    buf = bytearray()
                    while left:
                        d = s.recv(min(left, chunk))
                        if not d:
                            raise OSError('end of stream')
                        buf += d
                        while len(buf) >= chunk or len(buf) == left:
                            n = min(len(buf), chunk, left)
                            if buf[:n] != pat[left % 251:left % 251 + n]:
                                raise OSError('bytes differ')
                            del buf[:n]
                            left -= n
                            if not left:
                                break
                bulk_ok += 1
            except OSError as e:
                first_err = first_err or repr(e)
        secs_taken = max(time.monotonic() - t0, 1e-6)
        print(f"bulk_ok={bulk_ok} bulk_mbit={int(min(k, len(held)) * mib * 8.388608 / secs_taken)}",
              flush=True)
        report('bulk', usage())
        # Buffers grown by the bulk go back once idle (pinning
        # transports: the send rings): wait until the pinned memory is
        # back within 64 KiB a bulk connection of what it was before,
        # or CONN_HOLD_IDLE seconds (20), and report what it is then.
        # The server's grown buffers are receive buffers, which stay:
        # only the client waits.
        end = time.monotonic() + float(os.environ.get('CONN_HOLD_IDLE', '20'))
        while (mode == 'client' and usage()[1].get('VmPin', 0) > after_pin + 64 * k and
               time.monotonic() < end):
            time.sleep(0.25)
        report('idle', usage())
    print(f"ok={len(held)} err={err} first_err={first_err!r}", flush=True)
    time.sleep(secs)


main()
