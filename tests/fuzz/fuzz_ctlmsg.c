/*
 * tests/fuzz/fuzz_ctlmsg.c: libFuzzer target for the control-message decoder
 * (net/ctlmsg.c). Any bytes decode or give an error with a reason; a decoded
 * message of ours (not RUN_*, which only has its envelope read) encodes
 * again and decodes to the same fields.
 *
 *   make fuzz-build && tests/fuzz/fuzz_ctlmsg -max_total_time=60 CORPUS
 */
#include <stdint.h>
#include <string.h>

#include "base/log.h"
#include "net/ctlmsg.h"
#include "tests/fuzz/fuzz_seed.h"

static void seed(const shoal_ctlmsg *m)
{
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	if (shoal_ctlmsg_encode(m, &b))
		abort();
	fuzz_seed("ctlmsg", b.data, b.len);
	shoal_wire_buf_fini(&b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	shoal_log_set_level(SHOAL_LOG_ERROR);
	static const char js[] = "{\"peer\":\"a\",\"load\":3}";
	seed(&(shoal_ctlmsg){.type = SHOAL_CTLMSG_STATUS_REQ, .seq = 7});
	seed(&(shoal_ctlmsg){
	    .type = SHOAL_CTLMSG_STATUS_RESP, .seq = 8, .json = js, .json_len = sizeof js - 1});
	seed(&(shoal_ctlmsg){
	    .type = SHOAL_CTLMSG_LINK_PROBE, .seq = 9, .lep = 1, .rep = 2, .pad_len = 40});
	seed(
	    &(shoal_ctlmsg){.type = SHOAL_CTLMSG_LINK_ACK, .seq = 10, .lep = 0, .rep = 3, .n = 40});
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	shoal_ctlmsg m, m2;
	char why[SHOAL_WHY_LEN];
	why[0] = 0;
	shoal_err e = shoal_ctlmsg_decode(data, size, &m, why, sizeof why);
	if (e) {
		if (e != SHOAL_ERR_NOTFOUND && !why[0])
			abort(); /* an error names its reason */
		return 0;
	}
	if (m.type >= SHOAL_CTLMSG_RUN_REQ)
		return 0;
	if (m.json &&
	    (m.json < (const char *)data || m.json + m.json_len > (const char *)data + size))
		abort();
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	if (shoal_ctlmsg_encode(&m, &b) || shoal_ctlmsg_decode(b.data, b.len, &m2, why, sizeof why))
		abort();
	if (m2.type != m.type || m2.seq != m.seq)
		abort();
	if (m.type == SHOAL_CTLMSG_STATUS_RESP &&
	    (m2.json_len != m.json_len || (m.json_len && memcmp(m2.json, m.json, m.json_len))))
		abort();
	if ((m.type == SHOAL_CTLMSG_LINK_PROBE || m.type == SHOAL_CTLMSG_LINK_ACK) &&
	    (m2.lep != m.lep || m2.rep != m.rep ||
	     (m.type == SHOAL_CTLMSG_LINK_ACK && m2.n != m.n) ||
	     (m.type == SHOAL_CTLMSG_LINK_PROBE && m2.pad_len != m.pad_len)))
		abort();
	shoal_wire_buf_fini(&b);
	return 0;
}
