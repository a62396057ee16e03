#!/usr/bin/env python3
"""tests/sh/api_slowloris.py: slow HTTP clients for tests/sh/api_slowloris.sh.

api_slowloris.py PORT N FIRST_ADDR N_ADDRS STOPFILE OUT: N connections to
127.0.0.1:PORT, spread over the source addresses 127.0.0.FIRST_ADDR.. (N_ADDRS
of them), each sending the start of a request and then one header byte
every 0.5 s, never finishing it; a connection the server closes is opened
again (after 0.25 s: a persistent attacker, without a busy loop on the
shared test machine), until STOPFILE exists. OUT gets one line of figures: opened, closed
by the server, the most open at once, the longest life of a closed one (s).
"""
import errno
import os
import selectors
import socket
import sys
import time

port, n, first, naddr = (int(a) for a in sys.argv[1:5])
stop, out = sys.argv[5], sys.argv[6]
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
TRICKLE = b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"

sel = selectors.DefaultSelector()
conns = {}  # sock -> [born, bytes of TRICKLE sent, slot, head sent]
later = []  # (when, slot): connections to open again
opened = closed = most = 0
longest = 0.0


def open_one(k):
    global opened
    src = "127.0.0.%d" % (first + k % naddr)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.bind((src, 0))
        s.connect_ex(("127.0.0.1", port))
    except OSError:
        s.close()
        return
    conns[s] = [time.monotonic(), 0, k, False]
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    opened += 1


def drop(s, by_server):
    global closed, longest
    born = conns.pop(s)[0]
    sel.unregister(s)
    s.close()
    if by_server:
        closed += 1
        longest = max(longest, time.monotonic() - born)


for k in range(n):
    open_one(k)
last = 0.0
while not os.path.exists(stop):
    for key, ev in sel.select(timeout=0.1):
        s = key.fileobj
        st = conns.get(s)
        if st is None:
            continue
        if ev & selectors.EVENT_WRITE and not st[3]:
            try:
                s.send(HEAD)
                st[3] = True
                sel.modify(s, selectors.EVENT_READ)
            except OSError:
                drop(s, True)
                later.append((time.monotonic() + 0.25, st[2]))
            continue
        if ev & selectors.EVENT_READ:
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                drop(s, True)
                later.append((time.monotonic() + 0.25, st[2]))
    most = max(most, sum(1 for v in conns.values() if v[3]))
    now = time.monotonic()
    if now - last >= 0.5:
        last = now
        for s, st in list(conns.items()):
            if not st[3]:
                continue
            try:
                s.send(TRICKLE[st[1] % len(TRICKLE):][:1])
                st[1] += 1
            except OSError:
                drop(s, True)
                later.append((now + 0.25, st[2]))
    due = [k for t, k in later if t <= now]
    later = [(t, k) for t, k in later if t > now]
    for k in due:
        open_one(k)
for s in list(conns):
    drop(s, False)
with open(out, "w") as f:
    f.write("%d %d %d %.1f\n" % (opened, closed, most, longest))
