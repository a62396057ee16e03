#!/bin/bash
# tests/sh/weights_fetch.sh: a peer without the model file receives the
# tensors of its assignment from the peers that hold it
# (runtime/node/weights.h), serves, and after a restart serves from its
# weights cache without fetching.
#
#  1. Two peers with the trained austen model (--mem-limit 11M --ctx 256:
#     two peers cannot hold it, three make 3 stages) and a third with no
#     file, --model-id of the model, its own empty state dir, and the test
#     hook SHOAL_TEST_CORRUPT_CHUNK=2 on the serving peers (each flips one
#     byte of the 2nd tensor chunk it sends after computing its digest).
#     The plan becomes servable with 3 stages, the third peer holding one;
#     its log says the header and digests were verified, a chunk was
#     detected as damaged and fetched again, and the tensors were fetched
#     and verified; its status shows bytes fetched; a greedy run through
#     each peer gives the same ids as local `shoal run`.
#     Before that, the third peer's first fetch is cut (the test hook
#     SHOAL_TEST_FETCH_DIE_AFTER=2 kills it after 2 tensors); restarted, it
#     resumes with those 2 held in its cache.
#  2. The third peer is killed -9 and restarted with the same state dir
#     (again, up to 4 times, while a fresh plan gives it another stage)
#     (--model-id any this time): it serves again, its log says the cache
#     held its part, its status shows no bytes fetched, and the run through
#     it gives the same ids.
# Needs the test hooks (./configure --enable-test-hooks, ./bootstrap has
# them): `shoal --version` says whether the binary has them.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
"$B" --version | grep -q '^test hooks: yes' || skip "built without --enable-test-hooks"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"
P="It is a truth universally acknowledged"
"$B" run "$DENSE" -p "$P" -n 24 --temp 0 --ids >"$T/l-ids" 2>/dev/null || fail "local run"
"$B" run "$DENSE" -p "$P" -n 8 --temp 0 >"$T/l-text8" 2>/dev/null || fail "local text run"

SHOAL_TEST_CORRUPT_CHUNK=2 start w1 "$DENSE" --mem-limit 11M --ctx 256
SEED=$(ep w1)
SHOAL_TEST_CORRUPT_CHUNK=2 start w2 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
wait_for 20 eval 'status w1 && [ "$("$PC" "$T/st-w1.json" model_id)" != none ]' ||
	fail "w1 shows no model id"
MID=$("$PC" "$T/st-w1.json" model_id)
# the first fetch is cut: the test hook kills w3 after 2 tensors; the
# restarted w3 resumes with them held
SHOAL_TEST_FETCH_DIE_AFTER=2 start w3 "" --model-id "$MID" --mem-limit 11M --ctx 256 --peer "$SEED"
dead_w3() { ! kill -0 "${PID[w3]}" 2>/dev/null; }
wait_for 60 dead_w3 || fail "the fetch-interruption hook did not fire within 60 s"
stop w3
grep -q "test hook: 2 tensor(s) fetched, the process dies now" "$T/w3.log" ||
	fail "w3 died, but not from the hook"
held_before=$(grep -c "" "$T/w3.log")
t0=$(now_ms)
start w3 "" --model-id "$MID" --mem-limit 11M --ctx 256 --peer "$SEED"
wait_for 60 servable_all 3 w1 w2 w3 || fail "no servable 3-stage plan with the fetching peer within 60 s: $("$PC" "$T/st-w3.json" servable)"
echo "3-stage plan servable $(($(now_ms) - t0)) ms after the peer without the file started"
for s in 0 1 2; do [ "$("$PC" "$T/st-w1.json" stage $s)" = w3 ] && held=$s; done
[ -n "${held:-}" ] || fail "w3 holds no stage"
grep -q "header and .* tensor digests from .* verified against the model id" "$T/w3.log" ||
	fail "w3 did not log the verified header"
grep -q "detected, fetched again" "$T/w3.log" || fail "w3 did not detect the corrupted chunk"
resumed=$(sed -n "$((held_before + 1)),\$p" "$T/w3.log" | grep "weights: our part: .* missing" | head -n 1)
n_part=$(echo "$resumed" | sed 's/.*our part: \([0-9]*\) tensor.*/\1/')
n_miss=$(echo "$resumed" | sed 's/.*; \([0-9]*\) missing.*/\1/')
[ $((n_part - n_miss)) -ge 2 ] 2>/dev/null ||
	fail "the restarted w3 did not resume with the 2 tensors held: $resumed"
echo "fetch cut after 2 tensors, resumed: ${resumed#*weights: }"
grep -q "test hook: chunk 2 .* corrupted in transit" "$T/w1.log" "$T/w2.log" ||
	fail "no serving peer corrupted a chunk"
line=$(grep "fetched and verified" "$T/w3.log" | tail -n 1)
[ -n "$line" ] || fail "w3 did not log fetched and verified tensors"
echo "stage $held on w3: ${line#*weights: }"
status w3 || fail "status w3"
fetched=$("$PC" "$T/st-w3.json" weights fetch.bytes_fetched)
refetched=$("$PC" "$T/st-w3.json" weights fetch.refetched_chunks)
[ "$("$PC" "$T/st-w3.json" weights source)" = cache ] || fail "w3's weights are not from its cache"
[ "$fetched" -gt 0 ] 2>/dev/null || fail "w3's status shows no bytes fetched ($fetched)"
# the status counts this life's fetch: the damaged chunk may have come in
# the cut one
if sed -n "$((held_before + 1)),\$p" "$T/w3.log" | grep -q "detected, fetched again"; then
	[ "$refetched" -ge 1 ] 2>/dev/null || fail "w3's status shows no chunk fetched again ($refetched)"
else
	[ "$refetched" = 0 ] || fail "w3's status counts $refetched chunk(s) fetched again, its log none"
fi
echo "w3 fetched $fetched bytes, $refetched chunk(s) again, at $("$PC" "$T/st-w3.json" weights fetch.mb_s) MB/s"
for n in w1 w2 w3; do
	"$B" run --peer "$(ep $n)" --key "$T/k" -p "$P" -n 24 --temp 0 --ids >"$T/r-ids-$n" 2>"$T/r-err-$n" ||
		fail "run through $n: $(cat "$T/r-err-$n")"
	same "greedy ids through $n" "$T/r-ids-$n" "$T/l-ids"
done
ls "$T/w3/weights/"*.gguf >/dev/null 2>&1 || fail "no cache file in w3's state dir"

# 2. restarted: served from the cache. A fresh plan may give the restarted
#    peer another stage (its speed probe can land in another bucket); then
#    it fetches that part, which the cache keeps too, and is restarted
#    again: with 3 stages the cache holds its part by the third restart.
hit_ok=no
for attempt in 1 2 3 4; do
	stop w3
	: >"$T/w3.log"
	start w3 "" --model-id any --mem-limit 11M --ctx 256 --peer "$SEED" --api 127.0.0.1:0
	wait_for 60 servable_all 3 w1 w2 w3 || fail "no servable plan after w3's restart: $("$PC" "$T/st-w3.json" servable)"
	# its HTTP API names the model as the peers with the file do, and serves
	AP=$(api_port w3)
	named() { curl -s "http://127.0.0.1:$AP/v1/models" | grep -q '"id": *"austen-dense-q8_0"'; }
	wait_for 10 named || fail "w3's API does not name the model: $(curl -s "http://127.0.0.1:$AP/v1/models")"
	curl -s "http://127.0.0.1:$AP/v1/completions" -d "{\"model\":\"austen-dense-q8_0\",\"prompt\":\"$P\",\"max_tokens\":8,\"temperature\":0}" \
		>"$T/api-w3.json" || fail "completion through w3's API"
	[ "$(jget "$T/api-w3.json" 'd["choices"][0]["text"]')" = "$(cat "$T/l-text8")" ] ||
		fail "w3's API text '$(jget "$T/api-w3.json" 'd["choices"][0]["text"]')' vs local '$(cat "$T/l-text8")'"
	"$B" run --peer "$(ep w3)" --key "$T/k" -p "$P" -n 24 --temp 0 --ids >"$T/r-ids-w3b" 2>"$T/r-err-w3b" ||
		fail "run through restarted w3: $(cat "$T/r-err-w3b")"
	same "greedy ids through restarted w3" "$T/r-ids-w3b" "$T/l-ids"
	status w3 || fail "status w3"
	if grep -q "all in the cache (cache hit: nothing fetched)" "$T/w3.log"; then
		grep -q "fetched and verified" "$T/w3.log" && fail "w3 fetched tensors after a cache hit"
		[ "$("$PC" "$T/st-w3.json" weights fetch.bytes_fetched)" = 0 ] ||
			fail "w3 fetched $("$PC" "$T/st-w3.json" weights fetch.bytes_fetched) bytes after its restart"
		hit=$("$PC" "$T/st-w3.json" weights cache_hit_bytes)
		[ "$hit" -gt 0 ] 2>/dev/null || fail "w3 shows no cache hit bytes ($hit)"
		hit_ok=yes
		break
	fi
	grep -q "fetched and verified" "$T/w3.log" || fail "w3 neither hit its cache nor fetched its part"
	echo "restart $attempt: w3 got another stage and fetched it"
done
[ $hit_ok = yes ] || fail "w3 never served its part from the cache in 4 restarts"
echo "restarted w3 served its part from the cache ($hit bytes), nothing fetched; its API (--api with --model-id) named the model and served a completion equal to a local run"

# 3. an API on a peer that has no weights (a model id nobody serves): no
#    model listed, and a request gets 503 with the reason
start w4 "" --model-id "$(printf '0%.0s' $(seq 64))" --mem-limit 11M --peer "$SEED" --api 127.0.0.1:0
A4=$(api_port w4)
curl -s "http://127.0.0.1:$A4/v1/models" >"$T/m4.json" || fail "w4 /v1/models"
[ "$(jget "$T/m4.json" 'len(d["data"])')" = 0 ] || fail "w4 lists a model: $(cat "$T/m4.json")"
code=$(curl -s -o "$T/c4.json" -w '%{http_code}' "http://127.0.0.1:$A4/v1/completions" \
	-d '{"model":"austen-dense-q8_0","prompt":"x","max_tokens":2}')
[ "$code" = 503 ] || fail "w4 answered $code, not 503: $(cat "$T/c4.json")"
grep -q "no model yet" "$T/c4.json" || fail "w4's 503 has no reason: $(cat "$T/c4.json")"
echo "a peer without weights: no model listed, 503 with the reason"

echo "PASS"
