/*
 * scheduler/arith.c: the scheduler's integer arithmetic: saturating sums
 * and products, rounded-up quotients in 128 bits, and the two times every
 * cost is made of (a roofline, a transfer), clamped to SCHED__TMAX.
 *
 * Part: scheduler/ (pure). The lowest file of the part: it calls no other,
 * and cost.c, search.c, tensor.c and the rest call it. Why the clamps keep
 * every sum below 2^63: cost.c's bounds.
 */
#include "scheduler/sched_impl.h"

uint64_t sched__add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t sched__mul(uint64_t a, uint64_t b)
{
	unsigned __int128 x = (unsigned __int128)a * b;
	return x > UINT64_MAX ? UINT64_MAX : (uint64_t)x;
}

uint64_t sched__muldiv_up(uint64_t a, uint64_t b, uint64_t c)
{
	unsigned __int128 num = (unsigned __int128)a * b;
	unsigned __int128 q = num / c + (num % c != 0);
	return q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
}

/* ceil(num / den), clamped to one unit time */
static uint64_t div_up_clamp(unsigned __int128 num, unsigned __int128 den)
{
	unsigned __int128 q = num / den + (num % den != 0);
	return q > SCHED__TMAX ? SCHED__TMAX : (uint64_t)q;
}

/* The roofline of one piece of work on a peer: decode kernels stream the
 * weights while they multiply, so the slower of the two bounds the time;
 * adding them would count the overlapped part twice. */
uint64_t sched__roofline(uint64_t bytes, uint64_t flops, uint64_t bw, uint64_t fl)
{
	uint64_t tb = div_up_clamp((unsigned __int128)bytes * SCHED__NS_PER_S, bw);
	uint64_t tf = div_up_clamp((unsigned __int128)flops * SCHED__NS_PER_S, fl);
	return tb > tf ? tb : tf;
}

uint64_t sched__xfer_ns(uint64_t bytes, uint64_t bw)
{
	return div_up_clamp((unsigned __int128)bytes * SCHED__NS_PER_S, bw ? bw : 1);
}
