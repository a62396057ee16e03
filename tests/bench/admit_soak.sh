#!/bin/bash
# tests/bench/admit_soak.sh: the long form of tests/sh/admit_churn.sh (issue
# 35, item 1): --sessions 2, 6 clients on 2 owners (3 and 3; CLIENTS1/CLIENTS2), a kill -9 + restart of
# a stage peer every 40 s, 10 kills (~7 min). Not in `make check`. Prints
# the requests that completed, those lost or wrong (must be 0), the pauses
# replayed and the owner's queue waits from /metrics. KILLS and KILL_EVERY
# override.
exec env KILLS="${KILLS:-10}" KILL_EVERY="${KILL_EVERY:-40}" CLIENTS1="${CLIENTS1:-3}" CLIENTS2="${CLIENTS2:-3}" \
	"$(dirname "$0")/../sh/admit_churn.sh"
