#!/usr/bin/env python3
# tests/sh/demo_stream.py: the client of `make demo` (tests/sh/demo.sh).
# Streams a completion from a peer's OpenAI-compatible API (server-sent
# events), printing the text as it comes; after KILL_AFTER chunks it kills
# the process KILL_PID (-9) and goes on reading. At the end it writes a
# JSON summary (text, tokens, seconds, the longest pause between two
# chunks and the chunk it came before) to OUT. A stream that ends before
# KILL_AFTER chunks (a fast peer sends several tokens a chunk) is an
# error, and KILL_PID is killed then, so that a caller waiting for it
# does not wait forever.
#   demo_stream.py URL PROMPT MAX_TOKENS KILL_AFTER KILL_PID OUT
import json
import os
import signal
import sys
import time
import urllib.request

url, prompt, max_tokens, kill_after, kill_pid, out = sys.argv[1:7]
body = json.dumps({"model": "", "prompt": prompt, "max_tokens": int(max_tokens),
                   "temperature": 0, "stream": True,
                   "stream_options": {"include_usage": True}}).encode()
# "model": "" is refused; ask the peer for its model's name first
with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
    models = json.load(r)["data"]
body = json.loads(body)
body["model"] = models[0]["id"] if models else ""
req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
text, n, t_kill, tokens = [], 0, None, None
t0 = last = time.monotonic()
longest, longest_at = 0.0, 0
error = None
with urllib.request.urlopen(req, timeout=120) as r:
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        ev = json.loads(data)
        if "error" in ev:
            error = ev["error"].get("message", str(ev["error"]))
            break
        if ev.get("usage") and not ev.get("choices"):
            tokens = ev["usage"].get("completion_tokens")
            continue
        piece = ev["choices"][0].get("text", "")
        now = time.monotonic()
        if n and now - last > longest:
            longest, longest_at = now - last, n
        last = now
        n += 1
        text.append(piece)
        sys.stdout.write(piece)
        sys.stdout.flush()
        if n >= int(kill_after) and t_kill is None and int(kill_pid) > 0:
            os.kill(int(kill_pid), signal.SIGKILL)
            t_kill = now
            sys.stdout.write(" [<- a stage peer killed -9 here] ")
            sys.stdout.flush()
sys.stdout.write("\n")
if t_kill is None and int(kill_pid) > 0:
    os.kill(int(kill_pid), signal.SIGKILL)
    if not error:
        error = "the stream ended after %d chunks, before the kill after %s" % (n, kill_after)
json.dump({"text": "".join(text), "chunks": n, "tokens": tokens if tokens else n, "seconds": last - t0,
           "longest_pause_s": longest, "pause_after_chunk": longest_at,
           "killed_at_chunk": int(kill_after) if t_kill else None, "error": error},
          open(out, "w"))
sys.exit(1 if error else 0)
