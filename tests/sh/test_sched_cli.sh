#!/bin/sh
# tests/sh/test_sched_cli.sh: `shoal plan` end to end: text and --json output
# for the example clusters, the reason when a model does not fit, a GGUF
# header as the model, --spread-experts, usage errors, stable output.
src=${SHOAL_SRCDIR:-.}
bin=${SHOAL_BIN:-./shoal}
ex=$src/scheduler/examples
specs=$src/models/specs
tmp=${TMPDIR:-/tmp}/shoal-sched-cli.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

# text
if "$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/deepseek-v3-q4_k_m.json" \
	>"$tmp/out" 2>"$tmp/err"; then
	grep -q "ms/token" "$tmp/out" && grep -q "^stages:" "$tmp/out" &&
		grep -q "^memory:" "$tmp/out" && grep -q "tokens/s" "$tmp/out" &&
		grep -q "digest [0-9a-f]\{64\}" "$tmp/out" && ok "text plan" ||
		fail "text plan lacks a section: $(cat "$tmp/out")"
else
	fail "text plan exited $?: $(cat "$tmp/err")"
fi

# --json: the documented keys, the same digest as the text, stable
"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/deepseek-v3-q4_k_m.json" --json \
	>"$tmp/j1" 2>"$tmp/err" || fail "json plan exited $?: $(cat "$tmp/err")"
"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/deepseek-v3-q4_k_m.json" --json \
	>"$tmp/j2" 2>&1
missing=
for k in stages experts memory predicted_ms_per_token predicted_ns_per_token digest epoch \
	first_layer end_layer tokens_per_second embedding head; do
	grep -q "\"$k\"" "$tmp/j1" || missing="$missing $k"
done
[ -z "$missing" ] && ok "json keys" || fail "json lacks:$missing"
d_text=$(sed -n 's/.*digest \([0-9a-f]\{64\}\).*/\1/p' "$tmp/out")
grep -q "\"digest\": \"$d_text\"" "$tmp/j1" && ok "json digest = text digest" ||
	fail "json digest differs from $d_text"
cmp -s "$tmp/j1" "$tmp/j2" && ok "json stable" || fail "two runs differ"
if command -v python3 >/dev/null 2>&1; then
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["stages"][0]["first_layer"] == 0 and d["stages"][-1]["end_layer"] == 61' \
		"$tmp/j1" && ok "json parses" || fail "json does not parse as a plan"
fi

# does not fit: exit 1 and the reason with sizes
if "$bin" plan --view "$ex/studio-and-minis.json" --model "$specs/deepseek-v3-q8_0.json" \
	>"$tmp/out" 2>"$tmp/err"; then
	fail "deepseek q8 on studio+minis should not fit"
else
	rc=$?
	[ $rc -eq 1 ] && grep -q "needs [0-9.]* [KMGT]iB" "$tmp/err" &&
		grep -q "the cluster offers [0-9.]* [KMGT]iB" "$tmp/err" && ok "infeasible reason" ||
		fail "infeasible: rc $rc, $(cat "$tmp/err")"
fi

# DeepSeek V3.1 and Kimi K2 at the mixes people run: each is planned on the
# four Studios; Kimi K2 Q4_K_M (~620 GB) needs two of them, the Q2_K mix
# fits one; none fits the 208 GB home lab
for s in deepseek-v3.1-q4_k_m deepseek-v3.1-q2_k deepseek-v3.1-iq4_xs kimi-k2-q4_k_m kimi-k2-q2_k \
	kimi-k2-iq4_xs; do
	"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/$s.json" >"$tmp/out" 2>"$tmp/err" &&
		grep -q "ms/token" "$tmp/out" || fail "$s on mac-studio-x4: $(cat "$tmp/err")"
	if "$bin" plan --view "$ex/linux-homelab.json" --model "$specs/$s.json" >/dev/null 2>&1; then
		fail "$s should not fit the home lab"
	fi
done
"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/kimi-k2-q4_k_m.json" --json >"$tmp/k2" &&
	"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/kimi-k2-q2_k.json" --json >"$tmp/k2q2" ||
	fail "kimi-k2 json plans"
n_k2=$(grep -o '"devices"' "$tmp/k2" | wc -l) # one a stage
n_k2q2=$(grep -o '"devices"' "$tmp/k2q2" | wc -l)
[ "$n_k2" -ge 2 ] && [ "$n_k2q2" -eq 1 ] && ok "deepseek-v3.1 and kimi-k2 specs planned" ||
	fail "kimi-k2 stages: Q4_K_M $n_k2, Q2_K $n_k2q2"

# a GGUF header as the model
gguf=${SHOAL_DATA:-$src/tests/data}/models/austen-dense-q8_0.gguf
if [ -f "$gguf" ]; then
	"$bin" plan --view "$ex/linux-homelab.json" --model "$gguf" >"$tmp/out" 2>"$tmp/err" &&
		grep -q "ms/token" "$tmp/out" && ok "gguf model" ||
		fail "gguf model: $(cat "$tmp/err")"
fi

# --spread-experts puts a MoE's experts on several peers
"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/qwen3-30b-a3b-q8_0.json" \
	>"$tmp/keep" 2>&1
"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/qwen3-30b-a3b-q8_0.json" \
	--spread-experts --ctx 4096 --sessions 2 >"$tmp/spread" 2>&1
grep -q "kept with their layers" "$tmp/keep" && grep -q "experts per peer" "$tmp/spread" &&
	grep -q "4096 tokens x 2 sessions" "$tmp/spread" && ok "spread experts" ||
	fail "spread: $(cat "$tmp/keep" "$tmp/spread")"

# usage errors exit 2; a bad file exits 1 with its name
"$bin" plan >/dev/null 2>&1
[ $? -eq 2 ] && ok "usage" || fail "no arguments should exit 2"
"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/llama-3.1-70b-q4_k_m.json" --ctx x \
	>/dev/null 2>&1
[ $? -eq 2 ] && ok "bad --ctx" || fail "--ctx x should exit 2"
echo '{"peers": 3}' >"$tmp/bad.json"
"$bin" plan --view "$tmp/bad.json" --model "$specs/llama-3.1-70b-q4_k_m.json" >/dev/null \
	2>"$tmp/err"
[ $? -eq 1 ] && grep -q "peers" "$tmp/err" && ok "bad cluster file" ||
	fail "bad cluster: $(cat "$tmp/err")"

# the defaults are a node's: the model's training context (at most 4096)
# and sessions from memory (16 when they fit; on the home lab the KV of 16
# would push layers off its GPUs, so it takes fewer)
"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/qwen3-30b-a3b-q4_k_m.json" >"$tmp/d1" 2>&1
grep -q "KV reserved for 4096 tokens x 16 sessions" "$tmp/d1" && ok "spec: a node's defaults" ||
	fail "spec defaults: $(sed -n 2p "$tmp/d1")"
"$bin" plan --view "$ex/linux-homelab.json" --model "$specs/qwen3-30b-a3b-q4_k_m.json" --ctx 8192 \
	--sessions 1 >"$tmp/d2" 2>&1
grep -q "KV reserved for 8192 tokens x 1 session$" "$tmp/d2" && ok "--ctx and --sessions override" ||
	fail "overrides: $(sed -n 2p "$tmp/d2")"
# DeepSeek's MTP layer: a peer with "speculate": "mtp" makes the head peer
# count it (12.3 GB at Q8_0 with the embedding it shares), in the text and
# in --json; without such a peer the plan says nothing of it
if command -v python3 >/dev/null 2>&1; then
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["peers"][0]["speculate"]="mtp"; json.dump(d,open(sys.argv[2],"w"))' \
		"$ex/mac-studio-x4.json" "$tmp/mtp.json"
	"$bin" plan --view "$tmp/mtp.json" --model "$specs/deepseek-v3-q8_0.json" >"$tmp/out" 2>"$tmp/err" ||
		fail "plan with an mtp peer exited $?: $(cat "$tmp/err")"
	"$bin" plan --view "$tmp/mtp.json" --model "$specs/deepseek-v3-q8_0.json" --json >"$tmp/j3" 2>&1
	"$bin" plan --view "$ex/mac-studio-x4.json" --model "$specs/deepseek-v3-q8_0.json" >"$tmp/out0" 2>&1
	grep -q "MTP layer on .* beside the head: 1[12]\.[0-9] GiB" "$tmp/out" &&
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["head"]["mtp"] and d["head"]["mtp_bytes"] > 12e9' "$tmp/j3" &&
		! grep -q "MTP" "$tmp/out0" && ok "the MTP layer counted with an mtp peer" ||
		fail "MTP layer: $(grep MTP "$tmp/out" "$tmp/out0")"
fi

[ $fails -eq 0 ] || exit 1
exit 0
