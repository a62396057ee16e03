#!/bin/bash
# tests/sh/readme_check.sh: README.md's command blocks cannot rot. Every
# ```sh block carries a marker line before it: "<!-- readme-test: run -->"
# blocks are run here, command by command, from an empty directory with
# their own state directory; "<!-- readme-test: skip (why) -->" blocks say
# what runs them instead. Placeholders a reader replaces are replaced here
# the same way: /models/*.gguf -> the bundled model, my-cluster.json -> a
# shipped example cluster. `shoal node` (a foreground command) runs in the
# background until the block ends; the commands after it wait for it.
set -u
. "$(dirname "$0")/lib.sh"
README=${SHOAL_SRCDIR:-$(dirname "$0")/../..}/README.md
M=$DATA/models/austen-dense-q8_0.gguf
W=$T/work
mkdir -p "$W"
export SHOAL_STATE_DIR=$T/state
cp "$(dirname "$README")/scheduler/examples/linux-homelab.json" "$W/my-cluster.json"
# the README's node uses the default control port
if command -v ss >/dev/null && ss -ltn | grep -q ':47470 '; then
	skip "port 47470 is in use here (a shoal node running?)"
fi
python3 - "$README" "$T/blocks" <<'PY' || fail "README blocks"
import re, sys
text = open(sys.argv[1]).read().split("\n")
out, n, bad = open(sys.argv[2], "w"), 0, 0
for i, line in enumerate(text):
    if not line.startswith("```sh"):
        continue
    n += 1
    m = re.match(r"<!-- readme-test: (run|skip \(.+\)) -->$", text[i - 1] if i else "")
    if not m:
        print(f"README.md:{i + 1}: a sh block without a readme-test marker")
        bad = 1
        continue
    if m.group(1) != "run":
        continue
    j = i + 1
    while not text[j].startswith("```"):
        cmd = text[j].split("#", 1)[0].strip()
        if cmd:
            out.write(f"{j + 1}\t{cmd}\n")
        j += 1
    out.write("--\t--\n")
sys.exit(bad)
PY
ran=0
node_pid=""
cd "$W" || fail "cd"
while IFS=$'\t' read -r line cmd; do
	if [ "$cmd" = "--" ]; then # end of a block
		if [ -n "$node_pid" ]; then
			kill -TERM "$node_pid"
			wait "$node_pid" || fail "the README's node exited with $? on SIGTERM"
			node_pid=""
			unset "PID[readme_node]"
		fi
		continue
	fi
	c=${cmd//\/models\/Qwen3-30B-A3B-Q4_K_M.gguf/$M}
	c=${c//.\/shoal/$B}
	case "$cmd" in
	"./shoal node "*)
		# the default port may be some other test's connection's ephemeral
		# port for a moment (make -j2 check): try again, a few times
		for try in 1 2 3 4 5; do
			eval "exec $c" >"$T/node.log" 2>&1 & # exec: $! is the node itself
			node_pid=$!
			PID[readme_node]=$node_pid # lib.sh's exit trap kills it if we fail
			sleep 1
			if kill -0 "$node_pid" 2>/dev/null ||
				! grep -q "Address already in use" "$T/node.log"; then
				break
			fi
			[ $try = 5 ] || sleep 1
		done
		wait_for 30 eval '"$B" status --json 2>/dev/null | grep -q "\"servable\": true"' ||
			fail "README.md:$line: the node did not serve in 30 s: $(tail -5 "$T/node.log")"
		;;
	*)
		eval "$c" >"$T/out" 2>&1 || fail "README.md:$line: '$cmd' failed: $(tail -5 "$T/out")"
		;;
	esac
	echo "README.md:$line ok: $cmd"
	ran=$((ran + 1))
done <"$T/blocks"
[ $ran -ge 6 ] || fail "only $ran README commands ran"
# no secret in the working tree: the key went to the state directory
[ -z "$(find "$W" -name '*.key' -o -name '*key*' -type f | head -1)" ] ||
	fail "the README's commands left a key in the working tree: $(find "$W" -name '*key*')"
[ -f "$SHOAL_STATE_DIR/cluster.key" ] || fail "no key in the state directory after the README's commands"
git -C "$(dirname "$README")" check-ignore -q some/where/cluster.key 2>/dev/null ||
	[ ! -d "$(dirname "$README")/.git" ] || fail "the repository does not ignore *.key"
echo "the key is in the state directory, none in the tree; *.key is ignored"
echo "$ran README commands ran"
echo PASS
