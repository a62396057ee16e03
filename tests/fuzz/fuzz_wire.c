/*
 * tests/fuzz/fuzz_wire.c: libFuzzer target for the membership codec, the
 * SWIM receive path and the run protocol's decoder (not part of make check).
 *
 * Each input goes to the structural pre-scan, the message decoder, the
 * record decoder, the run-message decoder (net/runmsg.h) and a live
 * shoal_swim (which also decodes the records inside updates and applies
 * them).
 *
 *   make fuzz-build && tests/fuzz/fuzz_wire -max_total_time=300 RUN_DIR tests/fuzz/corpus_wire
 *
 * Seeds: every 20th of the 256 messages SIM_NET_DUMP=DIR tests/unit/test_swim
 * writes (all four types), and a RUN_REQ.
 */
#include <stdint.h>
#include <string.h>

#include "base/log.h"
#include "net/swim.h"
#include "net/ctlmsg.h"
#include "net/runmsg.h"
#include "net/wire.h"

static uint64_t f_now;
static uint64_t f_rng = 1;

static uint64_t f_now_us(void *c)
{
	return f_now;
}

static uint64_t f_rand(void *c)
{
	f_rng ^= f_rng << 13;
	f_rng ^= f_rng >> 7;
	f_rng ^= f_rng << 17;
	return f_rng;
}

static shoal_err f_send(void *c, const char *ep, const uint8_t *b, size_t n)
{
	/* what we send must always decode */
	static shoal_wire_update ups[SHOAL_WIRE_MAX_UPDATES];
	shoal_wire_msg m = {.updates = ups};
	if (shoal_wire_decode(b, n, &m, SHOAL_WIRE_MAX_UPDATES, NULL, 0))
		__builtin_trap();
	return SHOAL_OK;
}

static const shoal_swim_ops f_ops = {.now_us = f_now_us, .rand64 = f_rand, .send = f_send};
static shoal_swim *f_sw;

static void init(void)
{
	shoal_record r;
	shoal_log_set_level(SHOAL_LOG_ERROR); /* the decoder's warnings are expected */
	shoal_record_init(&r);
	r.id.b[0] = 0xaa;
	strcpy(r.name, "fuzz");
	strcpy(r.ctl_endpoint, "tcp://fuzz:1");
	r.proto_version = r.sched_version = 1;
	shoal_swim_new(NULL, &r, 1, &f_ops, NULL, &f_sw, NULL, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static shoal_wire_update ups[64];
	static shoal_record rec;
	shoal_wire_msg m = {.updates = ups};
	if (!f_sw)
		init();
	shoal_wire_prescan(data, size, SHOAL_WIRE_MAX_DEPTH, NULL, 0);
	if (!shoal_wire_decode(data, size, &m, 64, NULL, 0)) {
		/* decoded updates point into data */
		for (size_t i = 0; i < m.n_updates; i++)
			if (m.updates[i].record &&
			    (m.updates[i].record < data ||
			     m.updates[i].record + m.updates[i].record_len > data + size))
				__builtin_trap();
	}
	shoal_wire_record_decode(data, size, &rec, NULL, 0);
	/* the run protocol: decoded strings point into data */
	static shoal_runmsg rm;
	if (shoal_runmsg_decode(data, size, &rm, NULL, 0) == SHOAL_OK &&
	    rm.type == SHOAL_CTLMSG_RUN_REQ &&
	    (rm.req.prompt < (const char *)data ||
	     rm.req.prompt + rm.req.prompt_len > (const char *)data + size))
		__builtin_trap();
	shoal_swim_receive(f_sw, "tcp://peer:1", data, size, NULL, 0);
	f_now += 50000;
	shoal_swim_tick(f_sw);
	return 0;
}
