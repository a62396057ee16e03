#!/bin/bash
# tests/sh/plan_vs_run.sh: the plan's predicted ms/token and the decode
# step a loopback cluster then runs agree within 3x (issue 39, acceptance
# 2; the 25 % goal is tests/bench/plan_vs_run.sh's, whose figures on a
# shared machine are indicative only). One peer, a 2-stage pipeline and a
# 2-peer tensor group of the shared dense model (predicted on the data
# links the peers' probes timed), 3 runs each, each peer pinned to a CPU
# of its own where there are enough (PIN=1: unpinned, the group's members
# often share a core and every round waits for a time slice, 5x slower);
# skips without the shared models or python3 (the client-side timing),
# and when the nodes' compute probe ran under load (the prediction then
# rests on a figure marked as low). 3x, not tighter: on this shared 2-core
# machine at load 7-8, pinned, the ratios were 1.1-1.8 (the measured steps
# slow with the load, the prediction rests on a probe from one moment).
export BOUND=3 RUNS=${RUNS:-3} PIN=1
exec bash "$(dirname "$0")/../bench/plan_vs_run.sh" "${SHOAL_BUILDDIR:-.}" dense1 dense2 group2
