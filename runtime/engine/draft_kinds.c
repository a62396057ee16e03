/*
 * runtime/engine/draft_kinds.c: --speculate's names and drafters
 * (draft_kinds.h).
 *
 * Part: runtime/ (engine).
 */
#include <string.h>

#include "runtime/engine/draft_kinds.h"
#include "runtime/engine/draft_lookup.h"

static const char *const NAMES[] = {"off", "auto", "lookup", "draft", "mtp"};

shoal_err shoal_speculate_parse(const char *name, shoal_speculate_kind *out, char *why,
                                size_t why_len)
{
	for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
		if (name && !strcmp(name, NAMES[i])) {
			*out = (shoal_speculate_kind)i;
			return SHOAL_OK;
		}
	return shoal_why(why, why_len, SHOAL_ERR_INVAL,
	                 "--speculate takes auto, off, lookup, draft or mtp, not '%s'",
	                 name ? name : "");
}

const char *shoal_speculate_name(shoal_speculate_kind k)
{
	return (size_t)k < sizeof NAMES / sizeof NAMES[0] ? NAMES[k] : "?";
}

shoal_err shoal_speculate_check(shoal_speculate_kind k, char *why, size_t why_len)
{
	if (k == SHOAL_SPECULATE_DRAFT)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "--speculate draft: a draft model is not available yet "
		                 "(use lookup or auto)");
	if (k == SHOAL_SPECULATE_MTP)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "--speculate mtp: DeepSeek's MTP layer drafts in shoal run "
		                 "and through nodes, not here yet (use lookup or auto)");
	return SHOAL_OK;
}

shoal_err shoal_speculate_drafter(shoal_speculate_kind k, shoal_drafter *out)
{
	*out = (shoal_drafter){0};
	switch (k) {
	case SHOAL_SPECULATE_AUTO:
	case SHOAL_SPECULATE_LOOKUP:
		return shoal_draft_lookup_new(out);
	case SHOAL_SPECULATE_DRAFT:
	case SHOAL_SPECULATE_MTP:
		return SHOAL_ERR_UNSUPPORTED;
	default:
		return SHOAL_OK;
	}
}
