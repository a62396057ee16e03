#!/bin/bash
# tests/sh/plan_vs_run.sh: the plan's predicted ms/token and the decode
# step a loopback cluster then runs agree within 3x (issue 39, acceptance
# 2; the 25 % goal is tests/bench/plan_vs_run.sh's, whose figures on a
# shared machine are indicative only). One peer and a 2-stage pipeline of
# the shared dense model, 3 runs each; skips without the shared models or
# python3 (the client-side timing), and when the nodes' compute probe ran
# under load (the prediction then rests on a figure marked as low).
export BOUND=3 RUNS=${RUNS:-3}
exec bash "$(dirname "$0")/../bench/plan_vs_run.sh" "${SHOAL_BUILDDIR:-.}" dense1 dense2
