#!/usr/bin/env python3
"""tests/bench/soak_client.py: the clients and the report of tests/bench/soak.sh.

  soak_client.py run OUT SECONDS CASES PORT...   streaming clients, one
      thread each, CLIENTS of them (env, default 8) spread over the API
      ports in turn; each sends streamed /v1/completions one after another
      (prompt i mod the cases, greedy or seeded at temp 0.8 by its number)
      for SECONDS, and writes one JSON line per request to OUT.
  soak_client.py report OUT EVENTS              the figures: requests ok,
      lost, wrong; time to first token (p50, p99, max) over all requests
      and over those that started outside the pauses (EVENTS: lines
      "T_START T_END what", wall-clock seconds as `date +%s.%N` prints); exit 1
      when one was lost or wrong.

CASES is a JSON file: [{"prompt": P, "greedy": TEXT, "seeded": TEXT}], the
texts of an undisturbed single-peer run. A request is ok when its stream
ends with [DONE] and its text equals the case's; wrong when it ends so with
another text; lost otherwise (an error event, an HTTP error, a broken or
silent connection: no byte for REQ_TIMEOUT, default 120 s).
"""
import http.client
import json
import os
import sys
import threading
import time

MAX_TOKENS = 64
SEED = 11


def one_request(port, prompt, greedy, timeout):
    """(status, text, ttft_s, why): status 'done', 'error' or 'broken'."""
    body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "stream": True}
    body.update({"temperature": 0} if greedy else {"temperature": 0.8, "seed": SEED})
    t0 = time.monotonic()
    ttft = None
    text = []
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return "error", "", None, "HTTP %d: %s" % (r.status, r.read(300).decode(errors="replace"))
        for raw in r:
            line = raw.decode(errors="replace").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                c.close()
                return "done", "".join(text), ttft, ""
            ev = json.loads(data)
            if "error" in ev:
                c.close()
                return "error", "".join(text), ttft, "error event: %s" % ev["error"].get("message", "")[:300]
            for ch in ev.get("choices", []):
                if ch.get("text"):
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    text.append(ch["text"])
        c.close()
        return "broken", "".join(text), ttft, "the stream ended without [DONE]"
    except Exception as e:  # a broken connection or a timeout
        return "broken", "".join(text), ttft, "%s: %s" % (type(e).__name__, e)


def run(out, seconds, cases_path, ports):
    cases = json.load(open(cases_path))
    n = int(os.environ.get("CLIENTS", "8"))
    timeout = float(os.environ.get("REQ_TIMEOUT", "120"))
    end = time.monotonic() + seconds
    lock = threading.Lock()
    f = open(out, "a")

    def client(k):
        port = ports[k % len(ports)]
        greedy = k % 2 == 0
        i = 0
        while time.monotonic() < end:
            c = cases[(i + k) % len(cases)]
            w0 = time.time()
            st, text, ttft, why = one_request(port, c["prompt"], greedy, timeout)
            want = c["greedy" if greedy else "seeded"]
            if st == "done":
                res = "ok" if text.rstrip("\n") == want.rstrip("\n") else "wrong"
                if res == "wrong":
                    why = "got %r, want %r" % (text[:120], want[:120])
            else:
                res = "lost"
            rec = {"client": k, "port": port, "start": w0, "end": time.time(),
                   "ttft": ttft, "result": res, "why": why}
            with lock:
                f.write(json.dumps(rec) + "\n")
                f.flush()
            i += 1

    th = [threading.Thread(target=client, args=(k,)) for k in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    f.close()


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def report(out, events_path):
    recs = [json.loads(l) for l in open(out) if l.strip()]
    pauses = []
    for l in open(events_path):
        p = l.split(None, 2)
        if len(p) >= 2:
            pauses.append((float(p[0]), float(p[1])))

    def paused(r):
        # a request that was in flight during a pause window
        return any(r["start"] < b and r["end"] > a for a, b in pauses)

    ok = sum(r["result"] == "ok" for r in recs)
    lost = [r for r in recs if r["result"] == "lost"]
    wrong = [r for r in recs if r["result"] == "wrong"]
    all_t = [r["ttft"] for r in recs if r["ttft"] is not None]
    out_t = [r["ttft"] for r in recs if r["ttft"] is not None and not paused(r)]
    print("soak: %d requests: %d ok, %d lost, %d wrong" % (len(recs), ok, len(lost), len(wrong)))
    print("TTFT all %d: p50 %.3f s, p99 %.3f s, max %.3f s" %
          (len(all_t), pct(all_t, 50), pct(all_t, 99), max(all_t) if all_t else float("nan")))
    print("TTFT outside the pauses %d: p50 %.3f s, p99 %.3f s, max %.3f s" %
          (len(out_t), pct(out_t, 50), pct(out_t, 99), max(out_t) if out_t else float("nan")))
    by = {}
    for r in recs:
        by.setdefault(r["port"], 0)
        by[r["port"]] += r["result"] == "ok"
    print("ok per API port: %s" % ", ".join("%s: %d" % kv for kv in sorted(by.items())))
    for r in (lost + wrong)[:20]:
        print("  client %d port %d at %.1f: %s: %s" % (r["client"], r["port"], r["start"], r["result"], r["why"]))
    return 1 if lost or wrong else 0


if __name__ == "__main__":
    if len(sys.argv) >= 6 and sys.argv[1] == "run":
        run(sys.argv[2], float(sys.argv[3]), sys.argv[4], [int(p) for p in sys.argv[5:]])
    elif len(sys.argv) == 4 and sys.argv[1] == "report":
        sys.exit(report(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
