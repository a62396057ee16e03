#!/bin/bash
# tests/sh/chat_tmux.sh: `shoal chat` on a terminal, driven through tmux
# against a real `shoal node` on 127.0.0.1 (issue 36): the banner names the
# model, the cluster and the context; /help lists the commands; an unknown
# command is refused and not sent; a turn streams a reply; the Up arrow
# brings the last line back (libedit's history) and Enter sends it again;
# the history is kept in <state-dir>/chat_history; a turn the
# context cannot hold fails with a hint and leaves the conversation as it
# was, so the next turn is answered; Ctrl-D leaves. --peer is the peer's
# control address, as for `run` and `status` (issue 39: one meaning): the
# chat finds the API through the peer's status, and `run` and `status`
# answer with the same --peer; a peer that serves no API is named in a
# clear error.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
command -v tmux >/dev/null || skip "tmux is not installed"
[ -f "$DENSE" ] || skip "no $DENSE"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

start c1 "$DENSE" --ctx 128 --api 127.0.0.1:0
wait_for 30 servable_all 1 c1 || fail "no plan on one peer"
CTL=$(ep c1)

SOCK=$T/tmux.sock
tm() { tmux -S "$SOCK" "$@"; }
screen() { tm capture-pane -p -t chat -S -200; }
# seen TEXT: the pane shows TEXT within 20 s
seen() { wait_for 20 sh -c 'tmux -S "$1" capture-pane -p -t chat -S -200 | grep -qF -- "$2"' _ "$SOCK" "$1"; }
cleanup_tmux() { tm kill-server 2>/dev/null; }
trap 'cleanup_tmux; cleanup' EXIT

tm -f /dev/null new-session -d -s chat -x 160 -y 50 \
	"env SHOAL_STATE_DIR=$T/state TERM=xterm $B chat --peer $CTL --key $KEY --temp 0 -n 6; \
echo chat-exit-\$?; sleep 60" || fail "tmux new-session"

seen "shoal chat: model austen-dense-q8_0" || fail "no banner: $(screen)"
screen | grep -q "context 128 tokens" || fail "the banner does not give the context: $(screen)"
screen | grep -q "/help lists the commands" || fail "the banner does not point at /help: $(screen)"
echo "banner: $(screen | grep 'shoal chat: model')"

tm send-keys -t chat "/help" Enter
seen "/retry" || fail "/help lists no /retry: $(screen)"
screen | grep -q "/reset" && screen | grep -q "/system" || fail "/help: $(screen)"

tm send-keys -t chat "/bogus" Enter
seen "unknown command /bogus" || fail "an unknown command was not refused: $(screen)"

tm send-keys -t chat "Emma" Enter
# the reply: 6 tokens, then the prompt again
wait_for 30 sh -c '[ "$(tmux -S "$1" capture-pane -p -t chat -S -200 | grep -c "^>")" -ge 4 ]' _ "$SOCK" ||
	fail "no reply to the first turn: $(screen)"
R1=$(screen | grep -A1 '^> Emma$' | tail -n 1)
[ -n "$R1" ] || fail "the reply line is empty: $(screen)"
echo "turn 1: 'Emma' -> '$R1'"

# the Up arrow brings back the last line
lastline() { screen | grep -v '^$' | tail -n 1; }
tm send-keys -t chat Up
wait_for 5 sh -c 'tmux -S "$1" capture-pane -p -t chat | grep -v "^\$" | tail -n 1 | grep -q "^> Emma\$"' _ "$SOCK" ||
	fail "Up did not bring back the last line: last pane line '$(lastline)'"
tm send-keys -t chat Enter
wait_for 30 sh -c '[ "$(tmux -S "$1" capture-pane -p -t chat -S -200 | grep -c "^> Emma$")" -ge 2 ]' _ "$SOCK" ||
	fail "the line from the history was not sent: $(screen)"
wait_for 30 sh -c '[ "$(tmux -S "$1" capture-pane -p -t chat -S -200 | grep -c "^>")" -ge 5 ]' _ "$SOCK" ||
	fail "no reply to the second turn: $(screen)"
echo "Up + Enter sent 'Emma' again from the history"

# a turn that the context cannot hold: the error and a hint; the next turn
# is answered (the failed turn left the conversation)
LONG=$(printf 'Emma Woodhouse handsome clever and rich %.0s' $(seq 1 30))
tm send-keys -t chat -l "$LONG"
tm send-keys -t chat Enter
seen "/reset starts a new" || fail "no hint after a turn over the context: $(screen)"
tm send-keys -t chat "/reset" Enter
seen "(a new conversation)" || fail "/reset: $(screen)"
tm send-keys -t chat "Harriet" Enter
wait_for 30 sh -c 'tmux -S "$1" capture-pane -p -t chat -S -200 | grep -A1 "^> Harriet$" | tail -n 1 | grep -q "[a-z]"' _ "$SOCK" ||
	fail "no reply after the failed turn: $(screen)"
echo "a turn over the context: '$(screen | grep -m1 'context holds')' and a hint; the next turn answered"

tm send-keys -t chat C-d
seen "chat-exit-0" || fail "Ctrl-D did not leave with status 0: $(screen)"
H=$T/state/chat_history
[ -f "$H" ] && grep -q "Emma" "$H" && grep -q "Harriet" "$H" ||
	fail "the history file $H lacks the lines: $(cat "$H" 2>&1)"
echo "Ctrl-D left; the history file holds the lines"

# one meaning for --peer: run and status with the chat's --peer
"$B" run --peer "$CTL" --key "$KEY" -p "Emma" -n 4 --temp 0 >"$T/run.out" 2>"$T/run.err" &&
	[ -s "$T/run.out" ] || fail "run --peer $CTL: $(cat "$T/run.err")"
"$B" status --peer "$CTL" --key "$KEY" --json >"$T/st.json" 2>"$T/st.err" &&
	grep -q '"api"' "$T/st.json" || fail "status --peer $CTL: $(cat "$T/st.err")"
# a peer without the API: a clear error naming it
start c2 "" --peer "$CTL"
"$B" chat --peer "$(ep c2)" --key "$KEY" -p "Emma" >"$T/c2.out" 2>"$T/c2.err" &&
	fail "chat through a peer without an API succeeded"
grep -q "serves no HTTP API" "$T/c2.err" || fail "chat through a peer without an API: $(cat "$T/c2.err")"
echo "run, status and chat take the same --peer ($CTL); a peer without an API: '$(head -c 120 "$T/c2.err")'"
