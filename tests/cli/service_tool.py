#!/usr/bin/python3
"""Helpers for tests/cli/test_service.sh: raw frames for a live planner and
JSON field checks, written without autoaccel's own code (the frames are
encoded here by hand, so a bug in proto/ cannot hide itself).

  service_tool.py frame ADDR KIND [TOKEN]   send one bad or special frame, print
                                            what the planner answered
  service_tool.py json EXPR < FILE.json     print the Python expression EXPR
                                            evaluated with `d` = the parsed JSON
  service_tool.py children PID              print the child pids of PID
  service_tool.py free-port                 print a free TCP port on 127.0.0.1
  service_tool.py on-pty READY CMD...       run CMD as the session leader of a new terminal,
                                            hang the terminal up once READY holds (FILE: it
                                            exists; FILE:TEXT: it contains TEXT), print how CMD
                                            ended ("exit N" or "signal N")
  service_tool.py losses-close A B TOL      compare two `step loss` files: same steps,
                                            every loss within relative TOL (exit 1 if not)
  service_tool.py calib-import ADDR FILE    send FILE's text in a calib_import as is (no
                                            check on this side), print the answer as `frame`
                                            does
"""
import json
import os
import socket
import struct
import sys


def pack(v):
    """A minimal msgpack encoder: dict, str, bool, non-negative int."""
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes([v])
        return b"\xcf" + struct.pack(">Q", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        if len(b) < 256:
            return b"\xd9" + bytes([len(b)]) + b
        return (b"\xda" + struct.pack(">H", len(b)) if len(b) < 65536 else b"\xdb" + struct.pack(">I", len(b))) + b
    if isinstance(v, dict):
        assert len(v) < 16
        return bytes([0x80 | len(v)]) + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(v)


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def unpack_error(data):
    """Finds the error code and message in a reply frame without a full
    decoder: the planner's error frame is a map of v, t, code, message."""
    if len(data) < 4:
        return "no reply"
    n = struct.unpack(">I", data[:4])[0]
    body = data[4 : 4 + n]
    text = body.decode("utf-8", "replace")
    kind = "error" if b"\xa5error" in body else "other"
    code = None
    i = body.find(b"\xa4code")
    if i >= 0:
        c = body[i + 5]
        code = c - 256 if c >= 0xE0 else (struct.unpack(">b", body[i + 6 : i + 7])[0] if c == 0xD0 else c)
    return "%s code=%s text=%s" % (kind, code, "".join(ch if ch.isprintable() else "." for ch in text))


def connect(addr):
    if addr.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(addr[5:])
    else:
        host, port = addr[4:].rsplit(":", 1) if addr.startswith("tcp:") else addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
    s.settimeout(10)
    return s


def read_all(s):
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        out += b"<timeout: connection left open>"
    return out


def hello(token=None):
    m = {"v": 1, "t": "hello", "role": "client"}
    if token:
        m["token"] = token
    return frame(pack(m))


def send_bad_frame(s, kind, token=None):
    """Sends one bad or special frame on socket s: a KIND of the frame
    subcommand (peer_tool.py's soak sends them too)."""
    frames = {
        "malformed": frame(b"\xc1\xc1\xc1"),  # a reserved msgpack byte
        "oversized": struct.pack(">I", 64 << 20) + b"\x80",  # declares 64 MiB
        "truncated": struct.pack(">I", 100) + b"\x83" + b"\xa1v\x01" * 3,  # declares 100 bytes, sends 10
        "version": frame(pack({"v": 2, "t": "hello", "role": "client"})),
        "before-hello": frame(pack({"v": 1, "t": "status"})),
        "token": hello(token),
        "no-token": hello(),
        "zero-length": b"\0\0\0\0",
    }
    if kind not in frames:
        raise SystemExit("unknown frame kind " + kind)
    s.sendall(frames[kind])
    if kind == "truncated":  # then half-closes
        s.shutdown(socket.SHUT_WR)


def cmd_frame(addr, kind, token=None):
    s = connect(addr)
    send_bad_frame(s, kind, token)
    data = read_all(s)
    print(unpack_error(data))
    print("closed" if not data.endswith(b"left open>") else "open")


def read_frame(s):
    head = b""
    while len(head) < 4:
        b = s.recv(4 - len(head))
        if not b:
            return head
        head += b
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        b = s.recv(n - len(body))
        if not b:
            break
        body += b
    return head + body


def cmd_calib_import(addr, path):
    """What the planner itself makes of a calibration file, whatever a
    client would have checked first."""
    s = connect(addr)
    s.sendall(hello())
    read_frame(s)  # welcome
    with open(path) as f:
        s.sendall(frame(pack({"v": 1, "t": "calib_import", "id": 7, "json": f.read()})))
    print(unpack_error(read_frame(s)))


def cmd_children(pid):
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2 :].split()
        if fields[1] == str(pid):
            kids.append(d)
    print(" ".join(kids))


def cmd_losses_close(a, b, tol):
    def load(path):
        with open(path) as f:
            return [(int(x), float(y)) for x, y in (line.split() for line in f if line.strip())]

    la, lb = load(a), load(b)
    if [s for s, _ in la] != [s for s, _ in lb] or not la:
        print("the files have different steps (%d and %d lines)" % (len(la), len(lb)))
        raise SystemExit(1)
    worst = max(abs(x - y) / abs(y) for (_, x), (_, y) in zip(la, lb))
    print("largest relative difference %.3g" % worst)
    if worst > tol:
        raise SystemExit(1)


def cmd_on_pty(ready, argv):
    """A daemon started from a terminal that then closes: the kernel sends
    SIGHUP to the session leader when its terminal hangs up."""
    import pty
    import select
    import time
    pid, master = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    path, _, text = ready.partition(":")

    def is_ready():
        try:
            with open(path, "rb") as f:
                return text.encode() in f.read()
        except OSError:
            return False

    end = time.time() + 30
    while not is_ready() and time.time() < end:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                os.read(master, 4096)
            except OSError:
                break
    if not is_ready():
        print("on-pty: %s did not hold within 30 s" % ready)
    time.sleep(0.5)  # READY is written just before the command's loop starts
    os.close(master)  # the hangup
    end = time.time() + 20
    while time.time() < end:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            print("signal %d" % os.WTERMSIG(st) if os.WIFSIGNALED(st) else "exit %d" % os.WEXITSTATUS(st))
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("on-pty: still running 20 s after the hangup (killed)")


def main():
    a = sys.argv[1:]
    if a[0] == "frame":
        cmd_frame(a[1], a[2], a[3] if len(a) > 3 else None)
    elif a[0] == "json":
        d = json.load(sys.stdin)
        print(eval(a[1], {"d": d, "len": len, "sum": sum, "set": set, "sorted": sorted}))
    elif a[0] == "calib-import":
        cmd_calib_import(a[1], a[2])
    elif a[0] == "children":
        cmd_children(a[1])
    elif a[0] == "losses-close":
        cmd_losses_close(a[1], a[2], float(a[3]))
    elif a[0] == "on-pty":
        cmd_on_pty(a[1], a[2:])
    elif a[0] == "free-port":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
        s.close()
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
