/*
 * runtime/dist/dist_verify.c: the last stage's side of speculation
 * (dist.h "Speculation"): going back over the choices made at drafted
 * rows that the owner did not keep.
 *
 * Part: runtime/ (distributed inference). The last stage samples every
 * row of a step without knowing which drafts will be kept; the owner
 * says it by where its next step starts. A session remembers, for each
 * of its last DIST__SPEC_ROWS sampled rows, how many ids the row appended
 * to the penalty history and (with a grammar) the matcher's state after
 * it, so that a step starting at pos puts both back to what the row at
 * pos - 1 left: exactly the state of a run that never saw the drafts.
 */
#include <string.h>

#include "runtime/dist/dist_impl.h"

bool dist__verify_rewind(dist__sess *ss, uint32_t pos)
{
	if (!ss->next_pos || pos >= ss->next_pos)
		return true;
	uint32_t back = ss->next_pos - pos;
	/* the row at pos - 1 must still be remembered (it is a sampled one) */
	if (back >= DIST__SPEC_ROWS || pos < ss->n_prompt)
		return false;
	for (uint32_t p = pos; p < ss->next_pos; p++) {
		uint8_t a = ss->hadd[p % DIST__SPEC_ROWS];
		ss->n_hist = ss->n_hist >= a ? ss->n_hist - a : 0;
	}
	if (ss->gsnap)
		ss->gst = ss->gsnap[(pos - 1) % DIST__SPEC_ROWS];
	ss->next_pos = pos;
	return true;
}

void dist__verify_note(dist__sess *ss, uint32_t pos, uint8_t added)
{
	ss->hadd[pos % DIST__SPEC_ROWS] = added;
	if (ss->gsnap)
		ss->gsnap[pos % DIST__SPEC_ROWS] = ss->gst;
	ss->next_pos = pos + 1;
}
