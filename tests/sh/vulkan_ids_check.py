#!/usr/bin/env python3
"""tests/sh/vulkan_ids_check.py REF GOT: a greedy run GOT against the CPU
backend's REF, both `shoal run --logprobs 2` output (one JSON object per
token): while the two have chosen the same tokens, each step's logprob of
the chosen token must be within BOUND (0.05 nats: the CPU multiplies with
activations rounded to 8 bits, the GPU in F32) and the same token must be
chosen, unless REF's two best were within NEAR + BOUND of each other (a
near-tie, where the runs may rightly part: the comparison stops there).
Prints the steps compared; exit 1 on a difference."""
import json
import sys

BOUND = 0.05
NEAR = 0.05


def load(p):
    return [json.loads(l) for l in open(p) if l.startswith("{")]


ref, got = load(sys.argv[1]), load(sys.argv[2])
if not got:
    print("%s: no tokens" % sys.argv[2])
    sys.exit(1)
n = 0
for r, g in zip(ref, got):
    top = r["top_logprobs"]
    tie = len(top) > 1 and top[0]["logprob"] - top[1]["logprob"] < NEAR + BOUND
    if r["token"] != g["token"]:
        if tie:
            break
        print("%s: step %d: token %d, the CPU's %d (margin %.4f)" %
              (sys.argv[2], n, g["token"], r["token"], top[0]["logprob"] - top[1]["logprob"]))
        sys.exit(1)
    if abs(r["logprob"] - g["logprob"]) > BOUND:
        print("%s: step %d: logprob %.6f, the CPU's %.6f" % (sys.argv[2], n, g["logprob"],
                                                          r["logprob"]))
        sys.exit(1)
    n += 1
    if tie:
        break
print("%s: %d steps equal to the CPU's (tokens, logprobs within %g)" % (sys.argv[2], n, BOUND))
