#!/bin/bash
# tests/sh/client_errors.sh: the failures a `shoal run --peer` client meets,
# through real `shoal node` processes on 127.0.0.1: each ends the client
# with a reason in plain words (a stable part of it is asserted) and within
# 10 s (a bound against hangs; the goal is 3 s, and the measured seconds are
# printed for each case).
#
#  1. another cluster key: "the peer refused our key"
#  2. no key against a keyed node: "refused us without a key"
#  3. nothing listening (a stopped node's port): "connection refused"
#  4. a peer without --model: "serves no model"
#  5. no plan can hold the model (one peer offering 5 MiB): the need and
#     the supply in adaptive units ("needs 16.1 MiB ... offers 4.7 MiB"),
#     never "0.0 GiB"; once a peer with enough memory joins, it serves
#  6. a peer whose model file differs from that of the two others: it logs
#     that the cluster's plan leaves it out and why (the model id), plans
#     nothing, its client gets the same reason; the two others log that it
#     serves another model and still serve
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
OTHER=$DATA/models/tiny-kq-q6_k.gguf
BOUND_MS=10000
[ -x "$PC" ] || skip "$PC not built"
[ -f "$OTHER" ] || skip "$OTHER missing"

"$B" key new "$T/k" >/dev/null || fail "shoal key new"
"$B" key new "$T/other" >/dev/null || fail "shoal key new (other)"

# expect LABEL PATTERN PEER run-args...: the client fails with PATTERN
# (grep -E) on stderr within BOUND_MS; prints the seconds it took
expect() {
	local label=$1 pat=$2 peer=$3 t0 ms
	shift 3
	t0=$(now_ms)
	if timeout 30 "$B" run --peer "$peer" "$@" -p "It is" -n 4 --temp 0 --ids \
		>"$T/$label.out" 2>"$T/$label.err"; then
		fail "$label: the run succeeded: $(cat "$T/$label.out")"
	fi
	ms=$(($(now_ms) - t0))
	grep -Eq "$pat" "$T/$label.err" || fail "$label: expected /$pat/, got: $(cat "$T/$label.err")"
	[ "$ms" -le $BOUND_MS ] || fail "$label: the reason took $ms ms (bound $BOUND_MS)"
	printf '%-16s %d.%03d s  %s\n' "$label" $((ms / 1000)) $((ms % 1000)) "$(head -c 300 "$T/$label.err")"
}
reason() { status "$1" && "$PC" "$T/st-$1.json" servable | grep -q "$2"; }

start d1 "$DENSE" --ctx 256
SEED=$(ep d1)
wait_for 20 servable_all 1 d1 || fail "d1 not servable"

# 1-2. keys
expect wrong-key "the peer refused our key" "$SEED" --key "$T/other"
# ... and the key check names both fingerprints (the node logs it too)
FPK=$("$B" key fingerprint "$T/k") && FPO=$("$B" key fingerprint "$T/other") ||
	fail "shoal key fingerprint"
grep -q "key mismatch: the peer at tcp://$SEED (cluster '[^']*') holds key fingerprint $FPK; we hold key fingerprint $FPO" \
	"$T/wrong-key.err" || fail "wrong-key: no key check finding: $(cat "$T/wrong-key.err")"
grep -q "key mismatch: a client at .* holds key fingerprint $FPO; ours is key fingerprint $FPK" \
	"$T/d1.log" || fail "d1 did not log the client's key mismatch"
expect no-key "the peer refused us without a key" "$SEED" --insecure
grep -q "we hold no key (--insecure)" "$T/no-key.err" ||
	fail "no-key: no key check finding: $(cat "$T/no-key.err")"

# 3. nothing listening
start gone "$DENSE" --ctx 256
GONE=$(ep gone)
stop gone
expect refused "nothing is listening there \(connection refused\)" "$GONE" --key "$T/k"

# 4. a peer without a model
start bare "" --peer "$SEED"
expect no-model "serves no model" "$(ep bare)" --key "$T/k"

# 5. the model does not fit: figures in MiB
start small "$DENSE" --ctx 256 --mem-limit 5M
SMALL=$(ep small)
wait_for 10 reason small "needs" || fail "small: no infeasibility reason in status"
expect no-plan "no plan: needs [0-9]+\.[0-9] MiB .*the cluster offers [0-9]+\.[0-9] MiB" "$SMALL" --key "$T/k"
! grep -q "0\.0 GiB" "$T/no-plan.err" || fail "no-plan: a size printed as 0.0 GiB"
# memory comes back (a peer offering 20 MiB joins): served, no restart
start big "$DENSE" --ctx 256 --mem-limit 20M --peer "$SMALL"
wait_for 20 servable_all "" small big || fail "small, big: not servable: $("$PC" "$T/st-small.json" servable)"
"$B" run --peer "$SMALL" --key "$T/k" -p "It is" -n 4 --temp 0 --ids >/dev/null 2>"$T/r-err" ||
	fail "small does not serve once big joined: $(cat "$T/r-err")"
echo "memory back: served through small once big joined"
stop small
stop big

# 6. another model file than the cluster's
start d2 "$DENSE" --ctx 256 --peer "$SEED"
wait_for 20 servable_all 1 d1 d2 || fail "d1, d2 not servable"
start x1 "$OTHER" --ctx 256 --peer "$SEED"
X1=$(ep x1)
logged() { grep -q "their plan leaves us out" "$T/x1.log"; }
wait_for 10 logged || fail "x1 did not log that it was left out"
grep "their plan leaves us out" "$T/x1.log" | head -n 1 | grep -q "model id" ||
	fail "x1's log does not say why: $(grep "leaves us out" "$T/x1.log")"
wait_for 10 reason x1 "left out" || fail "x1: status does not say it was left out"
[ "$("$PC" "$T/st-x1.json" stages)" = 0 ] || fail "x1 formed a plan of its own"
expect model-differs "left out of the cluster's plan: our model file differs" "$X1" --key "$T/k"
grep -q "model id" "$T/model-differs.err" || fail "model-differs: no model id in the reason"
echo "x1 logged: $(grep -m1 "their plan leaves us out" "$T/x1.log" | cut -c1-220)"
wait_for 10 servable_all 1 d1 d2 || fail "d1, d2 no longer servable with x1"
"$PC" "$T/st-d1.json" left x1 | grep -q "model id" || fail "d1 does not list x1 as left out"
grep -q "first x1) serve model id .*they are left out of our plan" "$T/d1.log" ||
	fail "d1 did not log that x1 serves another model"
"$B" run --peer "$SEED" --key "$T/k" -p "It is" -n 4 --temp 0 --ids >/dev/null 2>"$T/r-err" ||
	fail "d1 does not serve with x1 about: $(cat "$T/r-err")"
echo "PASS"
