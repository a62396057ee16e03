/*
 * models/grammar_impl.h: the grammar program's layout, shared by the
 * matcher (grammar.c) and the compiler (grammar_schema.c).
 *
 * Part: models/. The layout is described in grammar.c's opening.
 */
#ifndef SHOAL_MODELS_GRAMMAR_IMPL_H
#define SHOAL_MODELS_GRAMMAR_IMPL_H

#include <stdint.h>

#define GRAMMAR__MAGIC 0x31524753u /* "SGR1" */
#define GRAMMAR__HDR   6u          /* header words */
#define GRAMMAR__NONE  0xffffffffu /* no continuation; no upper bound */

enum {
	GRAMMAR__LITS = 1,
	GRAMMAR__STRING,
	GRAMMAR__NUMBER,
	GRAMMAR__ARRAY,
	GRAMMAR__OBJECT,
	GRAMMAR__ALT,
	GRAMMAR__SEQ,
};

#endif
