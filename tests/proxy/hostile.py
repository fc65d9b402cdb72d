#!/usr/bin/env python3
"""Hostile input against a running worlds-proxy: malformed messages, a 1 GB length prefix (in the startup
packet and after it), half-sent startups held open, garbage, and 500 connections opened and dropped. After
each, a normal client still gets its answer; at the end the proxy's memory (VmRSS from /proc) and open
files are back near where they started.
    python3 tests/proxy/hostile.py PORT PROXY_PID DATABASE
"""
import socket
import struct
import sys
import time

PORT, PID, DB = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
failures = []


def check(what, ok, detail=""):
    print(("  ok   " if ok else "  FAIL ") + what + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(what)


def rss_kb():
    for line in open(f"/proc/{PID}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def open_fds():
    import os
    return len(os.listdir(f"/proc/{PID}/fd"))


def alive():
    import os
    try:
        os.kill(PID, 0)
        return True
    except OSError:
        return False


def connect():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    return s


def startup_packet(user="postgres", db=DB):
    body = struct.pack("!I", 196608) + b"user\0" + user.encode() + b"\0database\0" + db.encode() + b"\0\0"
    return struct.pack("!I", len(body) + 4) + body


def read_message(s):
    head = b""
    while len(head) < 5:
        chunk = s.recv(5 - len(head))
        if not chunk:
            return None, None
        head += chunk
    tag, length = head[0:1], struct.unpack("!I", head[1:5])[0]
    body = b""
    while len(body) < length - 4:
        chunk = s.recv(length - 4 - len(body))
        if not chunk:
            return None, None
        body += chunk
    return tag, body


def until_ready(s):
    """Messages until ReadyForQuery (or the end): their types."""
    tags = []
    while True:
        tag, body = read_message(s)
        if tag is None:
            return tags
        tags.append((tag, body))
        if tag in (b"Z",):
            return tags


def logged_in():
    s = connect()
    s.sendall(startup_packet())
    tags = until_ready(s)
    assert tags and tags[-1][0] == b"Z", f"no ReadyForQuery: {tags}"
    return s


def normal_query():
    """A well-behaved client's query through the proxy: True when it gets its row."""
    try:
        s = logged_in()
        s.sendall(b"Q" + struct.pack("!I", 4 + len(b"select 41 + 1\0")) + b"select 41 + 1\0")
        tags = until_ready(s)
        s.sendall(b"X\0\0\0\x04")
        s.close()
        return any(t == b"D" and b"42" in b for t, b in tags)
    except Exception as e:  # noqa: BLE001
        print("    normal query failed:", e)
        return False


def closed_with_error(s, code=None):
    """The proxy answers with an ErrorResponse (of that SQLSTATE) and closes, or just closes."""
    s.settimeout(10)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        return False, "still open after 10 s"
    except ConnectionResetError:
        pass
    if code is None:
        return True, data
    return (b"E" in data[:1] and code.encode() in data), data


check("normal query before", normal_query())
rss0, fds0 = rss_kb(), open_fds()
print(f"    start: VmRSS {rss0} kB, {fds0} open files")

# 1 GB length prefix in the startup packet
s = connect()
s.sendall(struct.pack("!I", 1 << 30) + struct.pack("!I", 196608))
ok, data = closed_with_error(s, "08P01")
check("startup packet claiming 1 GB: 08P01 and closed", ok, data)

# malformed startup packets: too short, parameters without their end, an unknown protocol
for name, packet in [
    ("length 3", struct.pack("!I", 3)),
    ("parameters not terminated", struct.pack("!I", 16) + struct.pack("!I", 196608) + b"user\0bob"),
    ("protocol 9.9", struct.pack("!I", 8) + struct.pack("!I", (9 << 16) | 9)),
]:
    s = connect()
    s.sendall(packet)
    ok, data = closed_with_error(s)
    check(f"malformed startup ({name}): closed", ok, data)

# a 1 GB length prefix after logging in: refused without reading (or allocating) it
s = logged_in()
s.sendall(b"Q" + struct.pack("!I", 1 << 30) + b"select")
ok, data = closed_with_error(s, "08P01")
check("Query claiming 1 GB: 08P01 and closed", ok, data)
check("memory didn't grow by the claimed size", rss_kb() - rss0 < 64 * 1024, rss_kb())

# a message length below 4
s = logged_in()
s.sendall(b"Q\0\0\0\x02")
ok, data = closed_with_error(s, "08P01")
check("length 2: 08P01 and closed", ok, data)

# an unknown message type and garbage: the server says what it thinks, the proxy carries on
s = logged_in()
s.sendall(b"z\0\0\0\x08abcd")
ok, data = closed_with_error(s, "08P01")
check("unknown message type: 08P01 and closed", ok, data)
s = logged_in()
s.sendall(bytes(range(256)) * 64)
ok, data = closed_with_error(s, "08P01")
check("garbage after login: 08P01 and closed", ok, data)

# Parse / Bind with broken bodies
s = logged_in()
s.sendall(b"P\0\0\0\x06ab" + b"S\0\0\0\x04")
tags = until_ready(s)
check("a Parse without its NULs: the server's error, then ReadyForQuery", any(t == b"E" for t, _ in tags), tags)
s.close()

# half-sent startups held open while others work
held = []
for i in range(50):
    h = connect()
    h.sendall(struct.pack("!I", 40) + struct.pack("!I", 196608) + b"user\0post")
    held.append(h)
check("a normal query while 50 half-sent startups wait", normal_query())
for h in held:
    h.close()

# 500 connections opened and dropped: at once, mid-startup, just after a startup
socks = []
for i in range(500):
    try:
        c = connect()
    except OSError as e:
        check("open connection", False, e)
        break
    if i % 5 == 1:
        c.sendall(struct.pack("!I", 200))
    elif i % 5 == 2:
        c.sendall(startup_packet())
    elif i % 5 == 3:
        c.sendall(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")  # SSLRequest, then gone
    socks.append(c)
for c in socks:
    try:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, not a clean close
    except OSError:
        pass
    c.close()
time.sleep(2)
check("the proxy is alive after 500 connections dropped", alive())
check("a normal query after 500 connections dropped", normal_query())
deadline = time.time() + 20
while time.time() < deadline and open_fds() > fds0 + 5:
    time.sleep(0.5)
rss1, fds1 = rss_kb(), open_fds()
print(f"    end: VmRSS {rss1} kB, {fds1} open files")
check("open files back near the start", fds1 <= fds0 + 5, f"{fds0} -> {fds1}")
check("VmRSS bounded (grew < 32 MB, under 64 MB)", rss1 - rss0 < 32 * 1024 and rss1 < 64 * 1024, f"{rss0} -> {rss1} kB")

if failures:
    print(f"hostile: {len(failures)} failed")
    sys.exit(1)
print(f"VmRSS {rss0} -> {rss1} kB, open files {fds0} -> {fds1}")
