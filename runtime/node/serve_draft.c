/*
 * runtime/node/serve_draft.c: the drafters of the runs this peer owns
 * (issue 38, runtime/dist/dist.h "Speculation"): --draft's model, opened
 * once with the cluster (its vocabulary checked against the target's),
 * and the drafter of each run, of the kind its request names or else of
 * --speculate's (for mtp, one that proposes the guess the last stage's MTP
 * layer sent back: runtime/dist/dist_mtp.c).
 *
 * Part: runtime/ (node). The draft model's engine is shared by the
 * drafters of every run: they are made, run (by the session owner) and
 * freed on the data thread only.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <stdio.h>

#include "base/log.h"
#include "runtime/backends.h"
#include "runtime/engine/draft_model.h"
#include "runtime/engine/mtp.h"

/* Streams that draft with the model at once when --sessions does not say:
 * the others go on with prompt lookup (auto) or without drafts (draft). */
#define SERVE_DRAFT_SESSIONS 4u

shoal_err serve__draft_open(shoal_serve *cl, char *why, size_t why_len)
{
	if (cl->cfg.speculate == SHOAL_SPECULATE_MTP) {
		char w[SHOAL_WHY_LEN] = "";
		shoal_err e = serve__spec_check(cl, SHOAL_SPECULATE_MTP, w, sizeof w);
		if (e)
			return shoal_why(why, why_len, e, "--%s", w);
	}
	if (!cl->cfg.draft_path)
		return SHOAL_OK;
	char w2[SHOAL_WHY_LEN] = "";
	const shoal_backend_ops *ops = NULL;
	shoal_err e =
	    shoal_backend_pick(&(shoal_backend_opts){.name = cl->cfg.backend}, &ops, w2, sizeof w2);
	if (e)
		return shoal_why(why, why_len, e, "--draft %s: %s", cl->cfg.draft_path, w2);
	/* of the fields the draft model takes, kv_type keeps the default */
	shoal_engine_config c = shoal_engine_config_default(cl->model);
	c.backend = ops;
	c.n_threads = cl->cfg.threads ? cl->cfg.threads : 1;
	c.n_ctx = cl->pol.ctx;
	c.max_rows = SHOAL_SERVE_MAX_ROWS;
	c.max_sessions = cl->cfg.sessions ? cl->cfg.sessions : SERVE_DRAFT_SESSIONS;
	/* the reason names the path and, for another vocabulary, the first
	 * difference */
	if ((e = shoal_draft_model_open(cl->cfg.draft_path, cl->model, &c, &cl->dm, why, why_len)))
		return e;
	SHOAL_LOG_I("cluster", "draft model %s: %u streams draft with it at once",
	            cl->cfg.draft_path, c.max_sessions);
	return SHOAL_OK;
}

void serve__draft_free(shoal_serve *cl)
{
	shoal_draft_model_free(cl->dm);
	cl->dm = NULL;
}

shoal_err serve__spec_check(const shoal_serve *cl, shoal_speculate_kind k, char *why,
                            size_t why_len)
{
	if (k == SHOAL_SPECULATE_DRAFT && !cl->dm)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "speculate 'draft': this node has no draft model "
		                 "(shoal node --draft FILE); it offers off, auto and lookup");
	if (k == SHOAL_SPECULATE_MTP && !cl->model->nextn)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "speculate 'mtp': the model has no MTP layer (no "
		                 "blk.%u.nextn.* tensors); this node offers off, auto, lookup%s",
		                 cl->model->hp.n_layer, cl->dm ? " and draft" : "");
	return SHOAL_OK;
}

void serve__drafter(shoal_serve *cl, shoal_speculate_kind k, shoal_drafter *out)
{
	*out = (shoal_drafter){0};
	if (cl->dm && (k == SHOAL_SPECULATE_DRAFT || k == SHOAL_SPECULATE_AUTO)) {
		char why[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_draft_model_drafter(cl->dm, out, why, sizeof why);
		if (!e) {
			SHOAL_LOG_D("cluster", "a run drafts with the draft model");
			return;
		}
		/* every draft session taken: auto goes on with prompt lookup,
		 * draft without drafts (the tokens are the same either way) */
		SHOAL_LOG_D("cluster", "no draft-model drafter: %s",
		            why[0] ? why : shoal_strerror(e));
		*out = (shoal_drafter){0};
		if (k == SHOAL_SPECULATE_DRAFT)
			return;
		k = SHOAL_SPECULATE_LOOKUP;
	}
	if (k == SHOAL_SPECULATE_MTP) { /* the last stage guesses (dist_mtp.c) */
		if (!cl->model->nextn || shoal_mtp_carry_new(out, NULL, NULL))
			*out = (shoal_drafter){0};
		return;
	}
	if (k == SHOAL_SPECULATE_DRAFT || shoal_speculate_drafter(k, out))
		*out = (shoal_drafter){0}; /* none: the run goes on without */
}
