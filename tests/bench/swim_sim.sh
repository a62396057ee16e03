#!/bin/sh
# tests/bench/swim_sim.sh: the SWIM scaling table (tests/bench/swim_sim.c)
# for N = 16..1024, at 10 joins per second, then with 10% loss, then a
# join storm (50 joins per second). Run from the build directory:
#   sh /path/to/tests/bench/swim_sim.sh [seed]
set -e
B=${SHOAL_BUILDDIR:-.}/tests/bench/swim_sim
seed=${1:-1}
echo "== 10 joins/s, no loss"
"$B" --seed "$seed" --gap-ms 100 16 64 256 1024
echo "== 10 joins/s, 10% loss"
"$B" --seed "$seed" --gap-ms 100 --loss 0.1 16 64 256
echo "== join storm: 50 joins/s"
"$B" --seed "$seed" --gap-ms 20 16 64 256
