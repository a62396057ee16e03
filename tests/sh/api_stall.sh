#!/bin/bash
# tests/sh/api_stall.sh: the API's guard does not shed a connection whose
# request the server itself has not read yet (issue 35). The guard sheds
# a connection whose request head has not arrived 10 s after it opened (a
# slow client, tests/sh/api_slowloris.sh); on a machine loaded enough that
# the connection's thread has not read a request the client did send, the
# old guard took the server's delay for the client's and closed the
# connection without a reply. The test hook SHOAL_TEST_API_STALL_MS=12000
# holds every new connection unread for 12 s; a completion must still be
# answered (HTTP 200 with its text), and the node must log no shed.
# Needs ./configure --enable-test-hooks (./bootstrap has it).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
command -v curl >/dev/null 2>&1 || skip "curl is not installed"
"$B" --version | grep -q '^test hooks: yes' || skip "built without --enable-test-hooks"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
SHOAL_TEST_API_STALL_MS=12000 start a1 "$DENSE" --ctx 256 --api 127.0.0.1:0
PORT=$(api_port a1)
URL=http://127.0.0.1:$PORT
ep a1 >/dev/null
CODE=503
for i in 1 2 3 4; do
	r=$(curl -s -o "$T/out" -w '%{http_code} %{time_total}' --max-time 60 "$URL/v1/completions" \
		-H 'Content-Type: application/json' \
		-d '{"prompt":"It is a truth universally acknowledged","max_tokens":4,"temperature":0}')
	CODE=${r% *}
	echo "request $i: HTTP $CODE after ${r#* } s"
	[ "$CODE" = 000 ] && fail "request $i: the connection was closed without a reply ($(grep -c shed "$T/a1.log") shed lines in a1's log)"
	[ "$CODE" = 200 ] && break
	sleep 1
done
[ "$CODE" = 200 ] || fail "no completion in 4 tries: HTTP $CODE $(head -c 300 "$T/out")"
grep -q '"text"' "$T/out" || fail "no text in $(head -c 300 "$T/out")"
python3 -c "import sys; sys.exit(0 if float('${r#* }') >= 11 else 1)" ||
	fail "the request took ${r#* } s: the stall hook did not hold it"
! grep -q 'shed [1-9]' "$T/a1.log" || fail "a1 shed a connection: $(grep 'shed' "$T/a1.log")"
echo "PASS"
