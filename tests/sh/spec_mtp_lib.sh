# tests/sh/spec_mtp_lib.sh: what spec_mtp.sh and spec_mtp_fetch.sh share
# (sourced after lib.sh): the deepseek2 fixture's shape (gen_fixture; add
# --nextn 1 for its MTP layer), the prompt and length of their runs, and
# helpers. Sets MTP_SHAPE, P, N.
MTP_SHAPE=(--arch deepseek2 --type Q8_0 --layers 6 --dim 256 --ff 512 --heads 4 --vocab 2048
	--head-dim 48 --kv-lora 64 --rope-dim 16 --v-head-dim 32 --q-lora 64 --dense-lead 1 --shared 1
	--groups 2 --groups-used 1 --sigmoid --experts 8 --experts-used 2 --ff-exp 128 --ctx 512 --seed 3)
P="hello world hello world"
N=60
drafted() { spec_counts "$1"; } # drafted NAME: "drafted accepted" from its status
args() { # args MODE: the sampler flags of a greedy or a seeded run
	if [ "$1" = greedy ]; then echo --temp 0; else echo --temp 0.9 --seed 3 --repeat-penalty 1.1; fi
}
# peer_runs NAME OUT WHERE: greedy and seeded runs through NAME ($T/OUT-MODE)
# give the local runs' ids ($T/l-MODE)
peer_runs() {
	local mode
	for mode in greedy seeded; do
		# shellcheck disable=SC2046
		"$B" run --peer "$(ep "$1")" --key "$KEY" -p "$P" -n $N --ids $(args $mode) \
			>"$T/$2-$mode" 2>"$T/$2.err" || fail "$mode run $3: $(cat "$T/$2.err")"
		same "$mode ids $3 with mtp" "$T/$2-$mode" "$T/l-$mode"
	done
}
