#!/bin/bash
# tests/bench/grammar_bench.sh: the issue's full grammar run (issue 36):
# 200 seeded constrained generations per schema over the 10 schemas of
# tests/sh/api_grammar.sh (make check runs 20 each, to stay near a minute:
# 80 generations took 5-21 s on a 2-core box shared with other builds, so
# 2000 take 2-8 minutes), then its refusal, tool-call and replay checks.
# Usage: tests/bench/grammar_bench.sh [N] (from the build tree, as make check).
export GRAMMAR_N=${1:-200}
exec "$(dirname "$0")/../sh/api_grammar.sh"
