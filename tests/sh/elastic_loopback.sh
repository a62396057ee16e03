#!/bin/bash
# tests/sh/elastic_loopback.sh: peers die, join and go away while runs stream,
# with real `shoal node` processes on 127.0.0.1, and every run still gets
# exactly the tokens of a single-peer run (issue 9).
#
# The trained dense model at --mem-limit 11M: any 3 peers hold it (3 stages).
#  1. 4 peers; a long greedy run streams through the owner (stage 0); the
#     peer of stage 1 is killed -9 mid-stream: the run pauses, replays its
#     history on the new plan and ends with the undisturbed run's ids. The
#     same with seeded sampling (temp 0.8, seed 7), killing the next stage
#     1. The longest pause (kill -> next token, from `shoal run --stats`)
#     is printed.
#  2. A 4th peer starts while a run streams: the run completes with the
#     same ids (whether or not the plan changed; printed).
#  3. With --sessions 1, two requests at once are both served (the second
#     waits in the queue). A client killed mid-run frees its session at
#     once: a new run completes right after, and the owner counted far
#     fewer tokens than the killed run asked for.
#  4. An owner that is no stage (the spare peer) dies mid-run: the stages
#     free its session (--sessions 1), so a run through another peer works;
#     restarted, it serves runs again (the last stage's cached results link
#     to its old life is not kept).
#  5. A stage peer killed -9 and restarted at once (same id, new
#     incarnation), 3 times, another stage each time: runs through every
#     peer work at once (the old links are redialled, not kept; a stale
#     endpoint is evidence; a session lost on the way is replayed), and
#     nobody re-plans: the restarted peer takes its part of the same plan
#     (before, each restart made one or two plan changes); a 4th
#     peer that joins and dies within 80 ms does not wedge the others.
#  6. 3 peers, 2 killed: the one left cannot hold the model and refuses a
#     run at once with the figures (need and supply); 2 peers start again:
#     served, with no restart of the first.
#  7. Two owners stream; one of them (a stage too) is killed -9: its client
#     is told within 10 s, the other owner's run completes with the
#     undisturbed ids.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
P="It is a truth universally acknowledged"
N=300
CTX=512

# names of the plan's stage peers and the spare, from $T/st-$1.json
stages_of() { local i; for i in 0 1 2; do "$PC" "$T/st-$1.json" stage $i; done; }
spare_of() { # spare_of NAME PEER...: the peer that holds no stage
	local p s=" $(stages_of "$1" | tr '\n' ' ') "
	shift
	for p in "$@"; do [[ "$s" == *" $p "* ]] || { echo "$p"; return; }; done
	echo none
}
# plan_since NAME LINE: the digests of the plans NAME took from log line LINE on
plan_since() {
	sed -n "$2,\$p" "$T/$1.log" | grep ' cluster: plan epoch ' | sed 's/.*digest \([0-9a-f]*\).*/\1/'
}
words() { if [ -f "$1" ]; then wc -w <"$1"; else echo 0; fi; }
at_least() { [ "$(words "$1")" -ge "$2" ]; }
runs_everywhere() { # runs_everywhere LABEL PEER...: 8 greedy ids through each equal $T/l-8
	local label=$1 n
	shift
	for n in "$@"; do
		"$B" run --peer "$(ep "$n")" --key "$KEY" -p "$P" -n 8 --temp 0 --ids --timeout-ms 20000 \
			>"$T/r-ev-$n" 2>"$T/r-ev-$n.err" || fail "a run through $n $label: $(cat "$T/r-ev-$n.err")"
		same "ids through $n $label" "$T/r-ev-$n" "$T/l-8"
	done
}
remote() { # remote OUT PEER ARGS...: a run through PEER, in the background (RPID)
	local out=$1 peer=$2
	shift 2
	"$B" run --peer "$(ep "$peer")" --key "$KEY" -p "$P" --ids --stats "$@" >"$out" 2>"$out.err" &
	RPID=$!
}

# 1. kill a stage peer mid-stream, greedy then seeded
start d1 "$DENSE" --mem-limit 11M --ctx $CTX
SEED=$(ep d1)
for n in d2 d3 d4; do start $n "$DENSE" --mem-limit 11M --ctx $CTX --peer "$SEED"; done
wait_for 30 servable_all 3 d1 d2 d3 d4 || fail "no common 3-stage plan on 4 peers"
ALIVE=(d1 d2 d3 d4)
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.8 --seed 7); fi
	"$B" run "$DENSE" -p "$P" -n $N --ctx $CTX --ids "${S[@]}" >"$T/l-$mode" 2>/dev/null || fail "local run"
	wait_for 30 servable_all 3 "${ALIVE[@]}" || fail "no servable plan before the $mode kill"
	OWNER=$("$PC" "$T/st-${ALIVE[0]}.json" stage 0)
	VICTIM=$("$PC" "$T/st-${ALIVE[0]}.json" stage 1)
	remote "$T/r-$mode" "$OWNER" -n $N "${S[@]}"
	wait_for 20 at_least "$T/r-$mode" 40 || fail "the $mode run did not stream: $(cat "$T/r-$mode.err")"
	at=$(words "$T/r-$mode")
	stop "$VICTIM"
	wait $RPID || fail "the $mode run failed after $VICTIM was killed: $(cat "$T/r-$mode.err")"
	same "$mode ids across the kill of $VICTIM" "$T/r-$mode" "$T/l-$mode"
	echo "$mode: $VICTIM (stage 1) killed -9 after ~$at of $N tokens: ids identical to one peer; $(tail -n 1 "$T/r-$mode.err" | sed 's/^shoal run: //')"
	NEW=()
	for n in "${ALIVE[@]}"; do [ "$n" != "$VICTIM" ] && NEW+=("$n"); done
	ALIVE=("${NEW[@]}")
	if [ $mode = greedy ]; then # back to 4 peers for the seeded case
		start "r$VICTIM" "$DENSE" --mem-limit 11M --ctx $CTX --peer "$(ep "${ALIVE[0]}")"
		ALIVE+=("r$VICTIM")
	fi
done
grep -q "paused after" "$T/$OWNER.log" || fail "the owner never paused a run"
stop_all

# 2. a fourth peer joins mid-stream
start j1 "$DENSE" --mem-limit 11M --ctx $CTX
SEED=$(ep j1)
for n in j2 j3; do start $n "$DENSE" --mem-limit 11M --ctx $CTX --peer "$SEED"; done
wait_for 30 servable_all 3 j1 j2 j3 || fail "no 3-stage plan on 3 peers"
OLD=$("$PC" "$T/st-j1.json" digest)
remote "$T/r-join" j2 -n $N --temp 0
wait_for 20 at_least "$T/r-join" 20 || fail "the run did not stream: $(cat "$T/r-join.err")"
start j4 "$DENSE" --mem-limit 11M --ctx $CTX --peer "$SEED"
wait $RPID || fail "the run failed while j4 joined: $(cat "$T/r-join.err")"
same "greedy ids while a peer joined" "$T/r-join" "$T/l-greedy"
wait_for 30 servable_all 3 j1 j2 j3 j4 || fail "no common plan with j4"
changed=no
[ "$("$PC" "$T/st-j1.json" digest)" != "$OLD" ] && changed=yes
echo "join: j4 started mid-stream; ids identical; plan changed: $changed"
stop_all

# 3. a killed client frees its session (--sessions 1, one peer); a second
#    request waits in the queue instead of being refused
start c1 "$DENSE" --ctx 4096 --sessions 1
wait_for 30 servable_all 1 c1 || fail "no plan on c1"
remote "$T/r-q1" c1 -n 200 --temp 0
Q1=$RPID
remote "$T/r-q2" c1 -n 200 --temp 0
wait $Q1 || fail "the first of two requests on one session: $(cat "$T/r-q1.err")"
wait $RPID || fail "the second of two requests on one session: $(cat "$T/r-q2.err")"
head -c 2000 "$T/l-greedy" | cut -d' ' -f1-200 >"$T/l-200"
same "the first queued request" "$T/r-q1" "$T/l-200"
same "the second queued request" "$T/r-q2" "$T/l-200"
echo "queue: two requests on one session both served, one after the other"
status c1 || fail "status of c1"
tok0=$("$PC" "$T/st-c1.json" data owner.tokens)
remote "$T/r-victim" c1 -n 4000 --temp 0
wait_for 20 at_least "$T/r-victim" 30 || fail "the long run did not stream: $(cat "$T/r-victim.err")"
kill -9 $RPID
wait $RPID 2>/dev/null
t0=$(now_ms)
"$B" run --peer "$(ep c1)" --key "$KEY" -p "$P" -n 8 --temp 0 --ids >"$T/r-next" 2>"$T/r-next.err" ||
	fail "a run after the killed client: $(cat "$T/r-next.err")"
dt=$(($(now_ms) - t0))
head -c 100 "$T/l-greedy" | cut -d' ' -f1-8 >"$T/l-8"
same "the next run's ids" "$T/r-next" "$T/l-8"
status c1 || fail "status of c1"
tok=$(($("$PC" "$T/st-c1.json" data owner.tokens) - tok0))
[ "$tok" -lt 4000 ] || fail "the killed client's run went on: the owner counted $tok tokens"
grep -q "a client went away" "$T/c1.log" || fail "c1 did not notice the client go"
echo "client killed mid-run: its session freed; the next run done in $dt ms (owner counted $tok tokens of the 4000 asked, and the next run's)"
stop_all

# 4. the spare owner dies mid-run; the stages free its session
start o1 "$DENSE" --mem-limit 11M --ctx $CTX --sessions 1
SEED=$(ep o1)
for n in o2 o3 o4; do start $n "$DENSE" --mem-limit 11M --ctx $CTX --sessions 1 --peer "$SEED"; done
wait_for 30 servable_all 3 o1 o2 o3 o4 || fail "no common plan on 4 peers (sessions 1)"
SPARE=$(spare_of o1 o1 o2 o3 o4)
[ "$SPARE" != none ] || fail "no spare peer"
remote "$T/r-spare" "$SPARE" -n 4000 --temp 0 --timeout-ms 5000
wait_for 20 at_least "$T/r-spare" 30 || fail "the run through the spare did not stream: $(cat "$T/r-spare.err")"
stop "$SPARE"
wait $RPID 2>/dev/null
OTHER=$("$PC" "$T/st-o1.json" stage 0)
"$B" run --peer "$(ep "$OTHER")" --key "$KEY" -p "$P" -n 8 --temp 0 --ids >"$T/r-after" 2>"$T/r-after.err" ||
	fail "a run after the spare owner died: $(cat "$T/r-after.err")"
same "ids after the owner died" "$T/r-after" "$T/l-8"
grep -q "its owner left" "$T/"o?.log || fail "no stage freed the dead owner's session"
start "$SPARE" "$DENSE" --mem-limit 11M --ctx $CTX --sessions 1 --peer "$(ep "$OTHER")"
wait_for 30 servable_all 3 o1 o2 o3 o4 || fail "no common plan after $SPARE restarted"
"$B" run --peer "$(ep "$SPARE")" --key "$KEY" -p "$P" -n 8 --temp 0 --ids --timeout-ms 20000 \
	>"$T/r-back" 2>"$T/r-back.err" || fail "a run through the restarted owner: $(cat "$T/r-back.err")"
same "ids through the restarted owner" "$T/r-back" "$T/l-8"
echo "owner $SPARE (no stage) killed mid-run: the stages freed its session; a run through $OTHER works, and through $SPARE once restarted"
stop_all

# 5. a stage peer killed and restarted at once, 3 times
start s1 "$DENSE" --mem-limit 11M --ctx $CTX
SEED=$(ep s1)
for n in s2 s3; do start $n "$DENSE" --mem-limit 11M --ctx $CTX --peer "$SEED"; done
for round in 1 2 3; do
	wait_for 30 servable_all 3 s1 s2 s3 || fail "no 3-stage plan (round $round)"
	MID=$("$PC" "$T/st-s1.json" stage $((round % 3)))
	LAST=$("$PC" "$T/st-s1.json" stage $(((round + 1) % 3)))
	LAST_EP=$(ep "$LAST") # the restarted peer's seed: not itself
	declare -A MARK
	for n in s1 s2 s3; do MARK[$n]=$(wc -l <"$T/$n.log"); done
	D=$(plan_since "$LAST" 1 | tail -1)
	stop "$MID"
	# the last restart finds its kept plan damaged: it says so and learns
	# the plan from its peers instead
	[ $round = 3 ] && for f in "$T/$MID"/plan-*; do printf 'SHPL garbage' >"$f"; done
	start "$MID" "$DENSE" --mem-limit 11M --ctx $CTX --peer "$LAST_EP"
	wait_for 30 servable_all 3 s1 s2 s3 || fail "no servable plan after $MID restarted"
	if [ $round = 3 ]; then
		sed -n "$((MARK[$MID] + 1)),\$p" "$T/$MID.log" | grep -q "ignoring the kept plan" ||
			fail "$MID did not report its damaged kept plan"
	else
		sed -n "$((MARK[$MID] + 1)),\$p" "$T/$MID.log" | grep -q "previous plan .* from the state directory" ||
			fail "$MID did not start from its kept plan"
	fi
	runs_everywhere "after $MID restarted" s1 s2 s3
	# the restarted peer takes its part of the same plan: no peer re-plans
	# (it learns the plan from its peers; its compute figures are kept)
	for n in s1 s2 s3; do
		[ "$n" = "$MID" ] && continue
		for d in $(plan_since "$n" $((MARK[$n] + 1))); do
			[ "$d" = "$D" ] || fail "$n re-planned ($d after $D) when $MID restarted"
		done
	done
	for d in $(plan_since "$MID" $((MARK[$MID] + 1))); do
		[ "$d" = "$D" ] || fail "the restarted $MID took another plan ($d, not $D)"
	done
	echo "restart $round: $MID (stage $((round % 3))) killed and restarted at once; the same plan, runs through every peer identical"
done
start s4 "$DENSE" --mem-limit 11M --ctx $CTX --peer "$SEED"
sleep 0.08
stop s4
wait_for 30 servable_all 3 s1 s2 s3 || fail "no servable plan after s4 came and went"
runs_everywhere "after s4 came and went" s1 s2 s3
echo "a 4th peer that joins and dies within 80 ms: runs through every peer identical"
stop_all

# 6. shrink below the model's size, then grow back
start g1 "$DENSE" --mem-limit 11M --ctx $CTX
SEED=$(ep g1)
for n in g2 g3; do start $n "$DENSE" --mem-limit 11M --ctx $CTX --peer "$SEED"; done
wait_for 30 servable_all 3 g1 g2 g3 || fail "no 3-stage plan"
stop g2
stop g3
no_plan() { status g1 && [[ "$("$PC" "$T/st-g1.json" servable)" == no* ]]; }
wait_for 20 no_plan || fail "g1 still serves alone"
t0=$(now_ms)
if "$B" run --peer "$SEED" --key "$KEY" -p "$P" -n 8 --temp 0 --ids --timeout-ms 10000 \
	>"$T/r-small" 2>"$T/r-small.err"; then
	fail "a run on a cluster too small for the model succeeded"
fi
dt=$(($(now_ms) - t0))
grep -q "needs .* the cluster" "$T/r-small.err" || fail "no figures in the refusal: $(cat "$T/r-small.err")"
[ "$dt" -lt 10000 ] || fail "the refusal took $dt ms"
echo "shrunk to 1 peer: refused in $dt ms: $(sed 's/^shoal run: //' "$T/r-small.err")"
for n in g2 g3; do start $n "$DENSE" --mem-limit 11M --ctx $CTX --peer "$SEED"; done
wait_for 30 servable_all 3 g1 g2 g3 || fail "no plan after growing back"
"$B" run --peer "$SEED" --key "$KEY" -p "$P" -n 8 --temp 0 --ids >"$T/r-grown" 2>"$T/r-grown.err" ||
	fail "a run after growing back: $(cat "$T/r-grown.err")"
same "ids after growing back" "$T/r-grown" "$T/l-8"
echo "grown back to 3 peers: served again, no restart"
stop_all

# 7. an owner dies: only its client loses the connection
start w1 "$DENSE" --mem-limit 11M --ctx $CTX
SEED=$(ep w1)
for n in w2 w3 w4; do start $n "$DENSE" --mem-limit 11M --ctx $CTX --peer "$SEED"; done
wait_for 30 servable_all 3 w1 w2 w3 w4 || fail "no common plan on 4 peers"
A=$("$PC" "$T/st-w1.json" stage 1) # an owner that is also a stage
Bo=$("$PC" "$T/st-w1.json" stage 0)
remote "$T/r-a" "$A" -n $N --temp 0
APID=$RPID
remote "$T/r-b" "$Bo" -n $N --temp 0
BPID=$RPID
wait_for 20 at_least "$T/r-b" 40 || fail "the run through $Bo did not stream: $(cat "$T/r-b.err")"
stop "$A"
t0=$(now_ms)
if wait $APID; then fail "the client of the dead owner $A got a whole run"; fi
dt=$(($(now_ms) - t0))
[ "$dt" -lt 10000 ] || fail "the dead owner's client waited $dt ms"
wait $BPID || fail "the other owner's run failed: $(cat "$T/r-b.err")"
same "the other owner's ids" "$T/r-b" "$T/l-greedy"
echo "owner $A killed: its client told in $dt ms ($(head -c 120 "$T/r-a.err")); the run through $Bo completed with identical ids"
