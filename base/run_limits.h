/*
 * base/run_limits.h: the limits of a run that every part applies: local
 * `shoal run` (runtime/cli), the generation loop (runtime/engine), prompt
 * building (models/prompt.h), the run protocol's decoder (net/runmsg.h)
 * and the cluster's owner (runtime/node). Defined once, here, because
 * models/ and net/ may not include each other or runtime/.
 */
#ifndef SHOAL_BASE_RUN_LIMITS_H
#define SHOAL_BASE_RUN_LIMITS_H

/* Tokens generated when -n is not given: a few sentences, enough to judge
 * a model, short enough to finish in seconds on a laptop for a 7B model. */
#define SHOAL_RUN_DEFAULT_TOKENS 128u
/* -n at most: far above any context; it keeps counts in 32 bits. */
#define SHOAL_RUN_MAX_TOKENS 1000000000u
/* --logprobs K at most: OpenAI's API allows 20 top logprobs; 100 leaves
 * room for analysis while keeping a line per token readable. */
#define SHOAL_RUN_MAX_LOGPROBS 100u
/* A system text longer than this is refused: 64 KiB is ~16k tokens at ~4
 * bytes a token, four times the default 4096-token context, so no servable
 * prompt needs more; it bounds what one request makes a peer render. A
 * prompt gets 16 times that (1 MiB), under the 4 MiB control message. */
#define SHOAL_RUN_MAX_SYSTEM 65536u
#define SHOAL_RUN_MAX_PROMPT (16u * SHOAL_RUN_MAX_SYSTEM)

#endif
