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
  peer_tool.py hold ADDR N SECONDS [TOKEN] open N connections, say nothing (or hello with
                                           TOKEN), hold them
  peer_tool.py flood ADDR SECONDS          keep 80 silent connections open, opening one for each
                                           the planner closes, and 64 more every second
  peer_tool.py late-hello ADDR TOKEN N SILENT
                                           connect, stay silent SILENT s, let N newer silent
                                           connections from this address in, then say hello:
                                           print whether the planner welcomed it
  peer_tool.py partial ADDR TOKEN N [HOLD] N token holders each send a 16 MiB frame but its
                                           last byte; hold them HOLD s (default 1)
  peer_tool.py fake-planner PATH SECONDS   accept an executor, welcome it, stop reading
                                           from it; print whether it reconnects
  peer_tool.py pending ADDR N MODEL.json   N submits with no executor connected
  peer_tool.py submit ADDR MODEL.json      one submit of the file's text as it is (no client-side
                                           check), print the planner's answer
  peer_tool.py soak UNIX TCP TOKEN SECONDS every abuse above and malformed frames, round
                                           after round
  peer_tool.py relay ADDR SECONDS          three fake CPU executors (two on one host) that
                                           wait up to SECONDS for a gang job, then use and
                                           abuse the run's store (kv_set, kv_get); one line
                                           per outcome
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


def cmd_hold(addr, n, seconds, token=None):
    """Opens n connections (with a token: each says hello first) and holds
    them. Prints how many the planner admitted (an open connection it said
    nothing to, or welcomed), refused ("connection refused") and displaced
    (closed to make room for a newer connection)."""
    socks, refused, displaced = [], 0, 0
    for _ in range(n):
        try:
            s = connect(addr)
            if token:
                s.sendall(hello(token))
            socks.append(s)
        except OSError:
            refused += 1
    # An answer other than a welcome is an error frame and a close. Collect
    # answers until none has come for a second.
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
            elif b"newer peers waited for room" in f:
                displaced += 1
            else:
                admitted_early += 1  # welcomed, or closed for another reason (a deadline)
    print("hold: %d admitted, %d refused, %d displaced" % (len(waiting) + admitted_early, refused, displaced),
          flush=True)
    time.sleep(seconds)
    for s in socks:
        s.close()


def cmd_flood(addr, seconds, keep=80):
    """The lock-out attack on TCP admission: keeps `keep` silent connections
    open for `seconds` (opening a new one whenever the planner closes one),
    and every second opens 64 more at once, all from this one address.
    Prints how many it opened and how many the planner closed, by reason."""
    socks, opened, closed = [], 0, {}
    end, burst = time.time() + seconds, 0.0

    def open_some(k):
        nonlocal opened
        for _ in range(k):
            try:
                socks.append(connect(addr))
                opened += 1
            except OSError:
                closed["connect failed"] = closed.get("connect failed", 0) + 1

    open_some(keep)
    while time.time() < end:
        if time.time() >= burst:
            open_some(64)
            burst = time.time() + 1.0
        ready, _, _ = select.select(socks, [], [], 0.05)
        for s in ready:
            try:
                f = s.recv(4096)
            except (ConnectionResetError, OSError):
                f = b""
            why = "displaced" if b"newer peers waited for room" in f else (
                "refused" if b"connection refused" in f else "no hello in time" if b"no hello" in f else "closed")
            closed[why] = closed.get(why, 0) + 1
            socks.remove(s)
            s.close()
        if len(socks) < keep:
            open_some(keep - len(socks))
    for s in socks:
        s.close()
    print("flood: %d silent connections opened in %.0f s; closed by the planner: %s" % (
        opened, seconds, ", ".join("%s %d" % kv for kv in sorted(closed.items())) or "none"), flush=True)


def cmd_late_hello(addr, token, n, silent):
    """A token holder slow to say hello (its process not yet scheduled after
    connect) while a flood from its own address arrives: the planner
    displaces a source's oldest silent connection for a newcomer, but not
    one within its grace after accept (planner/admit.c). Prints "welcomed",
    or "closed" and the planner's reason."""
    a = connect(addr)
    time.sleep(silent)
    others = [connect(addr) for _ in range(n)]
    time.sleep(0.05)  # the planner accepts them
    f = None
    try:
        a.sendall(hello(token))
        f = read_frame(a)
    except OSError:
        pass
    if f is not None and b"welcome" in f:
        print("late-hello: welcomed", flush=True)
    else:
        print("late-hello: closed: %s" % ("displaced" if f and b"newer peers waited for room" in f
                                          else unpack_error(f or b"")), flush=True)
    for s in others + [a]:
        s.close()


def cmd_partial(addr, token, n, size=16 << 20):
    """n token holders each send a frame of `size` bytes but its last byte,
    then hold it (a planner buffering them all would hold n * size). Prints
    how many the planner closed (for holding the most unfinished input)."""
    socks = [welcomed(addr, token) for _ in range(n)]
    head = struct.pack(">I", size)
    chunk = b"\x00" * (1 << 20)
    closed = 0
    for s in socks:
        try:
            s.sendall(head)
            left = size - 1
            while left:
                k = min(left, len(chunk))
                s.sendall(chunk[:k])
                left -= k
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed by the planner meanwhile: counted below
    # A holder the planner closed reads its error frame, or an end or a
    # reset (a reset can discard the frame); one still held reads nothing.
    said = 0
    for s in socks:
        try:
            f = read_frame(s, 0.5)
        except socket.timeout:
            continue
        except OSError:
            f = b""
        closed += 1
        said += f is not None and b"too much unfinished input" in f
    print("partial: %d of %d holders of a %d-byte frame one byte short were closed (%d said why)" % (
        closed, n, size, said), flush=True)
    return socks


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


def cmd_submit(addr, model_path):
    """One submit of a spec that `autoaccel submit` would refuse before
    sending it: what the planner itself answers."""
    with open(model_path) as f:
        model = f.read()
    s = welcomed(addr)
    s.sendall(frame(pack({"v": 1, "t": "submit", "id": 1, "model": model})))
    print("submit: %s" % unpack_error(read_frame(s) or b""))
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
        # Two bursts: the second finds the first's connections past their
        # quarter-second grace (planner/admit.c) and displaces them.
        cmd_flood(tcp, 1.5)
        for x in cmd_partial(tcp, token, 3):
            x.close()
    for kind in ("malformed", "oversized", "truncated", "version", "before-hello", "zero-length", "no-token"):
        s = connect(tcp if kind == "no-token" else unix)
        try:
            send_bad_frame(s, kind)
            read_frame(s, 5)
        except (OSError, socket.timeout):
            pass
        s.close()


def pack_any(v):
    """pack, plus bytes (msgpack bin) and maps of any size."""
    if isinstance(v, (bytes, bytearray)):
        n = len(v)
        head = b"\xc4" + bytes([n]) if n < 256 else b"\xc5" + struct.pack(">H", n) if n < 65536 else b"\xc6" + struct.pack(">I", n)
        return head + bytes(v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(pack_any(k) + pack_any(x) for k, x in v.items())
    return pack(v)


def unpack(b, i=0):
    """A minimal msgpack decoder (what the planner sends): (value, next offset)."""
    c = b[i]
    fixed = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
             0xCA: ">f", 0xCB: ">d"}
    if c < 0x80:
        return c, i + 1
    if c >= 0xE0:
        return c - 256, i + 1
    if c in fixed:
        n = struct.calcsize(fixed[c])
        return struct.unpack(fixed[c], b[i + 1 : i + 1 + n])[0], i + 1 + n
    if c in (0xC2, 0xC3):
        return c == 0xC3, i + 1
    if c == 0xC0:
        return None, i + 1
    strs = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}
    if 0xA0 <= c <= 0xBF or c in strs:
        w = 0 if c < 0xC0 else strs[c]
        n = c & 0x1F if w == 0 else int.from_bytes(b[i + 1 : i + 1 + w], "big")
        raw = b[i + 1 + w : i + 1 + w + n]
        return (bytes(raw) if c in (0xC4, 0xC5, 0xC6) else raw.decode()), i + 1 + w + n
    if 0x80 <= c <= 0x8F or c in (0xDE, 0xDF):
        w = 0 if c <= 0x8F else (2 if c == 0xDE else 4)
        n = c & 0x0F if w == 0 else int.from_bytes(b[i + 1 : i + 1 + w], "big")
        i += 1 + w
        d = {}
        for _ in range(n):
            k, i = unpack(b, i)
            d[k], i = unpack(b, i)
        return d, i
    if 0x90 <= c <= 0x9F:
        out, i = [], i + 1
        for _ in range(c & 0x0F):
            x, i = unpack(b, i)
            out.append(x)
        return out, i
    raise ValueError("unsupported msgpack byte 0x%02x" % c)


class FakeExecutor:
    """An executor played over a raw socket: hello, heartbeats, frames."""

    def __init__(self, addr, host, pid):
        self.s = connect(addr)
        self.buf = b""
        self.kept = []  # frames a wait did not want, for a later one
        self.closed = False  # the planner closed: read to the end
        self.broken = False  # a write failed (what was sent before may still be read)
        self.send({"v": 1, "t": "hello", "role": "executor",
                   "device": {"kind": "cpu", "name": "relay fake cpu", "index": 0, "memory": 8 << 30,
                              "host": host, "pid": pid}})
        self.s.settimeout(10)
        f = read_frame(self.s)
        m = unpack(f[4:])[0] if f else None
        if not m or m.get("t") != "welcome":
            raise SystemExit("relay: no welcome: %r" % (m,))
        self.id = m["peer_id"]

    def send(self, m):
        if self.broken:
            return
        try:
            self.s.sendall(frame(pack_any(m)))
        except OSError:
            self.broken = True

    def poll_frame(self):
        """One decoded frame if a whole one is buffered or arrives now."""
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    m, _ = unpack(self.buf[4 : 4 + n])
                    self.buf = self.buf[4 + n :]
                    return m
            if self.closed:
                return None
            r, _, _ = select.select([self.s], [], [], 0)
            if not r:
                return None
            try:
                b = self.s.recv(65536)
            except OSError:
                b = b""
            if not b:
                self.closed = True
                return None
            self.buf += b


def relay_wait(execs, pred, seconds):
    """Heartbeats every executor while waiting for a frame pred accepts
    (pred(executor, frame) -> True); returns (executor, frame) or None.
    Heartbeats are dropped, other frames kept for a later wait."""
    end, beat = time.time() + seconds, 0.0
    while time.time() < end:
        if time.time() - beat > 0.1:
            for e in execs:
                if not e.closed:
                    e.send({"v": 1, "t": "heartbeat"})
            beat = time.time()
        for e in execs:
            for i, m in enumerate(e.kept):
                if pred(e, m):
                    del e.kept[i]
                    return e, m
            m = e.poll_frame()
            while m is not None:
                if pred(e, m):
                    return e, m
                if m.get("t") != "heartbeat":
                    e.kept.append(m)
                m = e.poll_frame()
        time.sleep(0.01)
    return None


def relay_expect(execs, who, seconds, **want):
    got = relay_wait(execs, lambda e, m: e is who and m.get("t") != "heartbeat", seconds)
    m = got[1] if got else None
    ok = m is not None and all(m.get(k) == v for k, v in want.items())
    return m if ok else None


def cmd_relay(addr, seconds):
    # The stranger first: a submit's pool is the host of the executor that
    # said hello last, and a and b make a pool of two.
    c = FakeExecutor(addr, "relay-host-2", 40003)
    a = FakeExecutor(addr, "relay-host-1", 40001)
    b = FakeExecutor(addr, "relay-host-1", 40002)
    execs = [a, b, c]
    print("relay: executors %d %d %d up" % (a.id, b.id, c.id), flush=True)
    jobs = {}
    end = time.time() + seconds
    while (a not in jobs or b not in jobs) and time.time() < end:
        got = relay_wait(execs, lambda e, m: m.get("t") == "job", end - time.time())
        if not got:
            break
        e, m = got
        if m["world"] == 2 and e in (a, b):
            jobs[e] = m
        else:  # not the gang this test wants: end it at once
            e.send({"v": 1, "t": "result", "job": m["job"], "run": m["run"], "status": "error", "tokens_per_s": 0,
                    "step_ms_median": 0, "step_ms_spread": 0, "error": "fake executor",
                    "peak": {"params": 0, "grads": 0, "optim": 0, "acts": 0, "workspace": 0, "total": 0}})
    if a not in jobs or b not in jobs or jobs[a]["run"] != jobs[b]["run"]:
        raise SystemExit("relay: no gang of the two executors within %s s" % seconds)
    run, job = jobs[a]["run"], jobs[a]["job"]
    if {jobs[a]["rank"], jobs[b]["rank"]} != {0, 1}:
        raise SystemExit("relay: ranks %r" % ({jobs[a]["rank"], jobs[b]["rank"]},))
    print("relay: gang run %d of job %d on executors %d and %d" % (run, job, a.id, b.id), flush=True)

    def kv(e, t, key, rid, value=None):
        m = {"v": 1, "t": t, "id": rid, "run": run, "key": key}
        if value is not None:
            m["value"] = value
        e.send(m)

    # A stranger to the run may neither set nor get; it stays connected.
    kv(c, "kv_set", "x/addr/0", 11, b"1.2.3.4")
    m = relay_expect(execs, c, 5, t="error", id=11, code=-11)
    kv(c, "kv_get", "x/addr/0", 12)
    m2 = relay_expect(execs, c, 5, t="error", id=12, code=-11)
    print("relay: non-member set %s, get %s%s" % ("refused" if m else "NOT refused: %r" % (m,),
          "refused" if m2 else "NOT refused", ": " + m2["message"] if m2 else ""), flush=True)
    # A get before the set waits, and the set answers it.
    kv(a, "kv_get", "x/addr/1", 21)
    early = relay_wait(execs, lambda e, m: e is a and m.get("t") != "heartbeat", 0.5)
    kv(b, "kv_set", "x/addr/1", 22, b"10.0.0.2\x00\xff")
    m = relay_expect(execs, a, 5, t="kv_value", id=21, run=run, key="x/addr/1")
    print("relay: a get waited (%s) and was answered by the set: %s" %
          ("answered early" if early else "no early answer", repr(m["value"]) if m else "NO ANSWER"), flush=True)
    kv(a, "kv_get", "x/addr/1", 23)
    m = relay_expect(execs, a, 5, t="kv_value", id=23)
    print("relay: a get of a set key is answered at once: %s" % (repr(m["value"]) if m else "NO"), flush=True)
    kv(b, "kv_set", "x/addr/1", 24, b"another")
    m = relay_expect(execs, b, 5, t="error", id=24)
    print("relay: a second set of a key with another value: %s" % (m["message"] if m else "NOT refused"), flush=True)
    # 4 x world + 16 = 24 keys; x/addr/1 is one.
    for k in range(2, 26):
        kv(b, "kv_set", "x/k%d" % k, 100 + k, b"v")
    m = relay_expect(execs, b, 5, t="error")
    print("relay: key 25 of the run: %s" % (m["message"] if m else "NOT refused"), flush=True)
    # A get that never comes to be set, and more waiting gets than allowed.
    kv(a, "kv_get", "x/never", 31)
    for k in range(17):
        kv(b, "kv_get", "x/missing%d" % k, 200 + k)
    m = relay_expect(execs, b, 5, t="error")
    relay_wait([b], lambda e, m: False, 1.0)
    gone = b.closed
    print("relay: 17 waiting gets: %s%s" % (m["message"] if m else "NOT refused", "; closed" if gone else "; NOT closed"),
          flush=True)
    # A value over 64 KiB is a bad frame: the stranger is closed for it.
    kv(c, "kv_set", "x/big", 41, b"x" * 65537)
    m = relay_expect(execs, c, 5, t="error")
    print("relay: a 65537-byte value: %s" % (m["message"] if m else "NOT refused"), flush=True)
    # b's loss aborts a's rank; a's result ends the run, and its store with it.
    m = relay_expect(execs, a, 10, t="abort", run=run)
    a.send({"v": 1, "t": "result", "job": job, "run": run, "status": "cancelled", "tokens_per_s": 0,
            "step_ms_median": 0, "step_ms_spread": 0, "error": "aborted", "rank": jobs[a]["rank"],
            "peak": {"params": 0, "grads": 0, "optim": 0, "acts": 0, "workspace": 0, "total": 0}})
    time.sleep(1.0)
    kv(a, "kv_get", "x/addr/1", 51)
    m2 = relay_expect(execs, a, 5, t="error", id=51, code=-11)
    print("relay: aborted %s; after the run the store is gone: %s" % ("yes" if m else "NO",
          m2["message"] if m2 else "NOT refused"), flush=True)


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
        cmd_hold(a[1], int(a[2]), float(a[3]), tok(4))
    elif a[0] == "flood":
        cmd_flood(a[1], float(a[2]))
    elif a[0] == "late-hello":
        cmd_late_hello(a[1], a[2], int(a[3]), float(a[4]))
    elif a[0] == "partial":
        socks = cmd_partial(a[1], a[2], int(a[3]))
        time.sleep(float(tok(4) or 1))
        for x in socks:
            x.close()
    elif a[0] == "pending":
        cmd_pending(a[1], int(a[2]), a[3])
    elif a[0] == "submit":
        cmd_submit(a[1], a[2])
    elif a[0] == "soak":
        cmd_soak(a[1], a[2], a[3], float(a[4]))
    elif a[0] == "relay":
        cmd_relay(a[1], float(a[2]))
    elif a[0] == "fake-planner":
        cmd_fake_planner(a[1], float(a[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
