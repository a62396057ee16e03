#!/bin/bash
# tests/sh/node_edges.sh: small defects of issue 35, each as an operator
# meets it, on real `shoal node` processes:
#  1. a FIFO in place of a state file (the identity, the probe record):
#     `shoal node` refuses at start with a message naming it, not a hang
#     (a 10 s timeout stands in for the hang); so does a FIFO as --key;
#  2. an identity file at incarnation 2^64-2 is refused as damaged; at
#     2^63-2 the node starts at 2^63-1 and `shoal status --json` shows
#     9223372036854775807 (it showed -1, and the next refutation wrapped
#     to 0);
#  3. `max_tokens: 1.5` (and max_completion_tokens) gets a 400 naming the
#     parameter; `max_tokens: 2` is served;
#  4. a stream whose peer stops (SIGTERM) ends with an error event and
#     [DONE], not a silent close.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
command -v curl >/dev/null 2>&1 || skip "curl is not installed"
command -v mkfifo >/dev/null 2>&1 || skip "mkfifo is not installed"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

# refused NAME PATTERN [node args]: the node exits (within 10 s) with an error
# that matches PATTERN
refused() {
	local n=$1 pat=$2 rc=0
	shift 2
	timeout 10 "$B" node --state-dir "$T/$n" --name "$n" --listen 127.0.0.1:0 --no-mdns \
		--gossip-ms $GOSSIP_MS "$@" >"$T/$n.log" 2>&1 || rc=$?
	[ $rc != 124 ] || fail "$n: shoal node hung (killed after 10 s)"
	[ $rc != 0 ] || fail "$n: shoal node started"
	grep -q "$pat" "$T/$n.log" || fail "$n: no '$pat' in: $(tail -3 "$T/$n.log")"
	echo "$n refused (rc $rc): $(grep -m1 "$pat" "$T/$n.log" | cut -c1-200)"
}

# 1. FIFOs
mkdir -p "$T/f1" "$T/f2"
mkfifo "$T/f1/identity"
refused f1 "identity is a FIFO" --key "$KEY"
mkfifo "$T/f2/probe"
refused f2 "probe is a FIFO" --key "$KEY"
mkfifo "$T/kfifo"
refused f3 "not a regular file" --key "$T/kfifo"

# 2. incarnations at the top
mkdir -p "$T/i1" "$T/i2"
printf 'id 00112233445566778899aabbccddeeff\nincarnation 18446744073709551614\n' >"$T/i1/identity"
refused i1 "the file is damaged" --key "$KEY"
printf 'id 00112233445566778899aabbccddeeff\nincarnation 9223372036854775806\n' >"$T/i2/identity"
start i2 ""
ep i2 >/dev/null
status i2 || fail "status of i2"
python3 - "$T/st-i2.json" <<'PY' || fail "i2's incarnation in status --json: $(cat "$T/st-i2.json" | head -c 300)"
import json, sys
me = [p for p in json.load(open(sys.argv[1]))["peers"] if p["self"]][0]
print("i2 (identity at 2^63-2) shows incarnation", me["incarnation"])
sys.exit(0 if me["incarnation"] == 9223372036854775807 else 1)
PY
stop i2

# 3. max_tokens must be whole
start a1 "$DENSE" --ctx 512 --api 127.0.0.1:0
U=http://127.0.0.1:$(api_port a1)
served() {
	[ "$(curl -s -o "$T/ok.json" -w '%{http_code}' "$U/v1/completions" \
		-d '{"prompt":"It is","max_tokens":2,"temperature":0}')" = 200 ]
}
wait_for 30 served || fail "a1 never served max_tokens 2: $(cat "$T/ok.json")"
for key in max_tokens max_completion_tokens; do
	code=$(curl -s -o "$T/bad.json" -w '%{http_code}' "$U/v1/chat/completions" \
		-d "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"$key\":1.5}")
	[ "$code" = 400 ] || fail "$key 1.5: HTTP $code $(head -c 200 "$T/bad.json")"
	grep -q "whole number" "$T/bad.json" || fail "$key 1.5: $(cat "$T/bad.json")"
	echo "$key 1.5: 400 $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["error"]["message"])' "$T/bad.json")"
done

# 4. a stream whose peer stops ends with an error event
curl -s -N --max-time 60 "$U/v1/completions" \
	-d '{"prompt":"It is","max_tokens":4000,"temperature":0,"stream":true}' >"$T/cut.txt" 2>/dev/null &
CP=$!
streams() { grep -q '^data: {"id"' "$T/cut.txt"; }
wait_soon 20 streams || fail "the stream sent nothing"
stop a1 TERM
wait $CP
grep -q '^data: {"error"' "$T/cut.txt" || fail "no error event when a1 stopped: $(tail -c 300 "$T/cut.txt")"
tail -n 4 "$T/cut.txt" | grep -q '^data: \[DONE\]' || fail "no [DONE] after the error event"
echo "a stream cut by its peer's stop: $(grep '^data: {"error"' "$T/cut.txt" | cut -c1-120)"
