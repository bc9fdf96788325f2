#!/usr/bin/python3
"""Misbehaving peers for tests/cli/test_daemon_peers.sh and test_soak.sh: each
subcommand plays one abuse against a live planner (or an executor) over raw
sockets, with frames encoded by hand (tests/cli/service_tool.py), and prints
one line saying what happened.

  peer_tool.py sigpipe ADDR [TOKEN]        close without reading replies, three ways
  peer_tool.py no-read ADDR SECONDS [TOKEN]
                                           pipeline status requests, never read
  peer_tool.py big-hello ADDR N            N connections declaring a 16 MiB first frame
  peer_tool.py trickle ADDR INTERVAL [after-hello [TOKEN]]
                                           send hello one byte per INTERVAL s (after-hello:
                                           say hello, then trickle a status frame)
  peer_tool.py hold ADDR N SECONDS         open N connections, say nothing, hold them
  peer_tool.py fake-planner PATH SECONDS   accept an executor, welcome it, stop reading
                                           from it; print whether it reconnects
  peer_tool.py pending ADDR N MODEL.json   N submits with no executor connected
  peer_tool.py soak UNIX TCP TOKEN SECONDS every abuse above and malformed frames, round
                                           after round
"""
import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service_tool import connect, frame, hello, pack, send_bad_frame, unpack_error  # noqa: E402

STATUS = frame(pack({"v": 1, "t": "status", "id": 7}))


def read_frame(s, timeout=10):
    """One whole frame, or None at EOF."""
    s.settimeout(timeout)
    head = b""
    while len(head) < 4:
        b = s.recv(4 - len(head))
        if not b:
            return None
        head += b
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        b = s.recv(min(65536, n - len(body)))
        if not b:
            return None
        body += b
    return head + body


def welcomed(addr, token=None):
    s = connect(addr)
    s.sendall(hello(token))
    f = read_frame(s)
    if f is None or b"welcome" not in f:
        raise SystemExit("no welcome: %s" % (unpack_error(f or b""),))
    return s


def cmd_sigpipe(addr, token=None):
    # 1. A request, then close at once: the reply meets a closed socket.
    for _ in range(20):
        s = welcomed(addr, token)
        s.sendall(STATUS)
        s.close()
    # 2. Stop reading first (on a unix socket, the planner's write is EPIPE).
    for _ in range(5):
        s = welcomed(addr, token)
        s.shutdown(socket.SHUT_RD)
        s.sendall(STATUS * 3)
        time.sleep(0.2)
        s.close()
    # 3. 30,000 pipelined requests and a reset instead of a close.
    s = welcomed(addr, token)
    try:
        s.sendall(STATUS * 30000)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the planner closed first: it does not queue replies without bound
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    print("sigpipe: done")


def cmd_no_read(addr, seconds, token=None):
    s = welcomed(addr, token)
    s.settimeout(5)
    sent, end = 0, time.time() + seconds
    batch = STATUS * 500
    try:
        while time.time() < end:
            s.sendall(batch)
            sent += 500
    except (BrokenPipeError, ConnectionResetError, socket.timeout) as e:
        if isinstance(e, socket.timeout):
            print("no-read: still open after %d requests (the planner stopped reading)" % sent)
            return
        print("no-read: closed by the planner after %d requests" % sent)
        return
    print("no-read: still open after %d requests" % sent)


def cmd_big_hello(addr, n):
    socks = []
    for _ in range(n):
        s = connect(addr)
        try:
            s.sendall(struct.pack(">I", 16 << 20) + b"\x85" + b"\0" * (64 << 10))
        except (BrokenPipeError, ConnectionResetError):
            pass
        socks.append(s)
    refused = 0
    for s in socks:
        try:
            f = read_frame(s, 5)
        except (ConnectionResetError, socket.timeout):
            f = None
        if f and b"limited to 4096 bytes" in f:
            refused += 1
        s.close()
    print("big-hello: %d of %d refused before anything was buffered" % (refused, n))


def cmd_trickle(addr, interval, after_hello=False, token=None):
    if after_hello:
        s = welcomed(addr, token)
        data = STATUS
    else:
        s = connect(addr)
        data = hello()
    start = time.time()
    s.settimeout(interval)
    i = 0
    while time.time() - start < 120:
        try:
            if i < len(data) - 1:  # never the last byte: the frame stays incomplete
                s.sendall(data[i : i + 1])
                i += 1
            f = read_frame(s, interval)
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            f = None
        print("trickle: closed after %.1f s: %s" % (time.time() - start, unpack_error(f or b"")))
        return
    print("trickle: still open after 120 s")


def cmd_hold(addr, n, seconds):
    socks, refused = [], 0
    for _ in range(n):
        try:
            socks.append(connect(addr))
        except OSError:
            refused += 1
    # A refused connection gets an error frame and a close; an admitted one
    # hears nothing. Collect answers until none has come for a second.
    waiting, admitted_early = list(socks), 0
    while waiting:
        ready, _, _ = select.select(waiting, [], [], 1.0)
        if not ready:
            break
        for s in ready:
            waiting.remove(s)
            try:
                f = s.recv(4096)
            except ConnectionResetError:
                f = b""
            if b"connection refused" in f:
                refused += 1
            else:
                admitted_early += 1  # closed for another reason (a deadline)
    print("hold: %d admitted, %d refused" % (len(waiting) + admitted_early, refused), flush=True)
    time.sleep(seconds)
    for s in socks:
        s.close()


def cmd_fake_planner(path, seconds):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(seconds)
    c, _ = srv.accept()
    if read_frame(c) is None:
        raise SystemExit("fake-planner: no hello")
    c.sendall(frame(pack({"v": 1, "t": "welcome", "peer_id": 1, "heartbeat_ms": 100})))
    # Stop reading, but keep the connection: the executor's next heartbeat
    # is written to a socket whose reader is gone (EPIPE on a unix socket).
    c.shutdown(socket.SHUT_RD)
    try:
        c2, _ = srv.accept()
    except socket.timeout:
        print("fake-planner: no reconnect within %d s" % seconds)
        raise SystemExit(1)
    print("fake-planner: the executor reconnected")
    c2.close()
    c.close()


def cmd_pending(addr, n, model_path):
    """n submits on one connection to a planner with no executor: each
    would wait in memory for one; past the cap they are refused."""
    with open(model_path) as f:
        model = f.read()
    s = welcomed(addr)
    for i in range(n):
        s.sendall(frame(pack({"v": 1, "t": "submit", "id": i + 1, "model": model})))
    refused = 0
    try:
        while True:
            f = read_frame(s, 2)
            if f is None:
                break
            if b"enough submits already wait" in f:
                refused += 1
    except socket.timeout:
        pass
    print("pending: %d of %d submits refused" % (refused, n))
    s.close()


def soak_round(unix, tcp, token, k):
    """One round of every abuse, short versions; k varies the choice."""
    import io
    import contextlib
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        cmd_sigpipe(unix) if k % 2 == 0 else cmd_sigpipe(tcp, token)
        cmd_no_read(unix, 1.5)
        cmd_big_hello(tcp, 10)
        cmd_trickle(tcp, 0.2)
        cmd_trickle(unix, 0.2, True)
        cmd_hold(tcp, 30, 0.5)
    for kind in ("malformed", "oversized", "truncated", "version", "before-hello", "zero-length", "no-token"):
        s = connect(tcp if kind == "no-token" else unix)
        try:
            send_bad_frame(s, kind)
            read_frame(s, 5)
        except (OSError, socket.timeout):
            pass
        s.close()


def cmd_soak(unix, tcp, token, seconds):
    end, rounds = time.time() + seconds, 0
    while time.time() < end:
        soak_round(unix, tcp, token, rounds)
        rounds += 1
    print("soak: %d rounds of every abuse in %.0f s" % (rounds, seconds))


def main():
    a = sys.argv[1:]
    tok = lambda i: a[i] if len(a) > i else None  # noqa: E731
    if not a:
        raise SystemExit(__doc__)
    if a[0] == "sigpipe":
        cmd_sigpipe(a[1], tok(2))
    elif a[0] == "no-read":
        cmd_no_read(a[1], float(a[2]), tok(3))
    elif a[0] == "big-hello":
        cmd_big_hello(a[1], int(a[2]))
    elif a[0] == "trickle":
        cmd_trickle(a[1], float(a[2]), tok(3) == "after-hello", tok(4))
    elif a[0] == "hold":
        cmd_hold(a[1], int(a[2]), float(a[3]))
    elif a[0] == "pending":
        cmd_pending(a[1], int(a[2]), a[3])
    elif a[0] == "soak":
        cmd_soak(a[1], a[2], a[3], float(a[4]))
    elif a[0] == "fake-planner":
        cmd_fake_planner(a[1], float(a[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
