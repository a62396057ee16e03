/*
 * models/manifest.c: a model's manifest for the scheduler (see manifest.h).
 *
 * Part: models/. Pure arithmetic over tensor sizes and shapes; the model
 * was shape-checked when it was opened, so products here stay far below
 * 2^64 (dims are bounded by 2^20, experts by 2^12: see model.c).
 */
#include "models/manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2 FLOPs per multiply-add per token for a matrix, or for each matrix of a
 * stack (MLA's per-head attn_k_b, attn_v_b); 0 for 1-D tensors. */
static uint64_t mat_flops(const shoal_gguf_tensor *t)
{
	if (!t || t->n_dims < 2)
		return 0;
	return 2 * t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

static uint64_t nb(const shoal_gguf_tensor *t)
{
	return t ? t->nbytes : 0;
}

shoal_err shoal_model_manifest(const shoal_model *m, shoal_manifest *out)
{
	const shoal_hparams *hp = &m->hp;
	memset(out, 0, sizeof *out);
	out->layers = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *out->layers);
	if (!out->layers)
		return SHOAL_ERR_NOMEM;
	out->n_layer = hp->n_layer;
	out->n_embd = hp->n_embd;
	out->n_vocab = hp->n_vocab;

	/* The name: general.name, else the file's base name. */
	const char *s;
	size_t sl;
	if (!shoal_gguf_get_str(m->gguf, "general.name", &s, &sl) || sl == 0) {
		s = shoal_gguf_shard_path(m->gguf, 0);
		const char *slash = strrchr(s, '/');
		s = slash ? slash + 1 : s;
		sl = strlen(s);
	}
	if (sl > sizeof out->name - 1)
		sl = sizeof out->name - 1;
	for (size_t i = 0; i < sl; i++) {
		unsigned char c = (unsigned char)s[i];
		out->name[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}

	for (uint32_t il = 0; il < hp->n_layer; il++) {
		const shoal_layer *L = &m->layers[il];
		shoal_manifest_layer *ml = &out->layers[il];
		const shoal_gguf_tensor *own[SHOAL_LAYER_MAX_TENSORS];
		size_t n_own = shoal_layer_own_tensors(L, own);
		for (size_t i = 0; i < n_own; i++) {
			ml->bytes += nb(own[i]);
			ml->flops += mat_flops(own[i]);
		}
		/* K and V rows of one token: 2 * n_head_kv * head_dim elements,
		 * QK^T and AV 4 * n_head * head_dim FLOPs per cached token; MLA
		 * keeps the latent and the rope key, kv_lora + n_rot elements,
		 * and attends in the absorbed form: per head, scores over the
		 * row and values from the latent, 2 * (2 kv_lora + n_rot) FLOPs
		 * (what the engine stores and computes, see engine.c). */
		ml->kv_bytes_per_token =
		    2ull * hp->n_head_kv * hp->head_dim * SHOAL_MANIFEST_KV_ELT;
		ml->attn_flops_per_ctx = 4ull * hp->n_head * hp->head_dim;
		/* a sliding layer's ring (the engine's on a backend with rings;
		 * one without keeps the context, which the plan does not know) */
		if (shoal_hparams_layer_swa(hp, il) && hp->n_swa)
			ml->kv_positions = hp->n_swa + SHOAL_MANIFEST_KV_RING_ROWS;
		if (hp->mla_kv_b) /* the engine's F32 keys made from attn_kv_b */
			ml->bytes += (uint64_t)hp->n_head * hp->kv_lora_rank *
			             (hp->head_dim - hp->n_rot) * 4;
		if (hp->mla) {
			ml->kv_bytes_per_token =
			    (hp->kv_lora_rank + (uint64_t)hp->n_rot) * SHOAL_MANIFEST_KV_ELT;
			ml->attn_flops_per_ctx =
			    (uint64_t)hp->n_head * 2 * (2ull * hp->kv_lora_rank + hp->n_rot);
		}
		/* what a tensor group splits: attention by KV heads (MLA's latent
		 * cache is shared by every head: its attention stays whole on
		 * every member, n_head_kv 0), a dense FFN by columns */
		ml->n_head_kv = hp->mla ? 0 : hp->n_head_kv;
		ml->n_ff = L->ffn_gate ? hp->n_ff : 0;
		ml->attn_bytes = nb(L->wq) + nb(L->wk) + nb(L->wv) + nb(L->wo) + nb(L->bq) +
		                 nb(L->bk) + nb(L->bv) + nb(L->bo) + nb(L->attn_sinks) +
		                 nb(L->wq_a) + nb(L->q_a_norm) + nb(L->wq_b) + nb(L->wkv_a) +
		                 nb(L->kv_a_norm) + nb(L->wk_b) + nb(L->wv_b) + nb(L->wkv_b);
		if (hp->n_expert && L->ffn_gate_exps) {
			ml->n_expert = hp->n_expert;
			ml->n_expert_used = hp->n_expert_used;
			ml->expert_bytes = (nb(L->ffn_gate_exps) + nb(L->ffn_up_exps) +
			                    nb(L->ffn_down_exps) + nb(L->ffn_gate_exps_b) +
			                    nb(L->ffn_up_exps_b) + nb(L->ffn_down_exps_b)) /
			                   hp->n_expert;
			/* gate, up: n_embd x n_ff_exp; down: n_ff_exp x n_embd. */
			ml->expert_flops = 2ull * 3 * hp->n_embd * hp->n_ff_exp;
		}
	}
	out->embd_bytes = nb(m->tok_embd);
	out->head_bytes = nb(m->output_norm) + nb(m->output);
	out->head_flops = mat_flops(m->output);
	out->tied_head = hp->tied_head;
	/* One F32 hidden-state row. */
	out->act_bytes_per_token = (uint64_t)hp->n_embd * 4;
	/* The MTP layer: its tensors and, as a layer's, the engine's F32
	 * keys and its latent cache (it is a deepseek2 block: MLA). */
	if (m->nextn) {
		const shoal_gguf_tensor *xt[SHOAL_NEXTN_MAX_TENSORS];
		size_t nx = shoal_nextn_tensors(m, xt);
		for (size_t i = 0; i < nx; i++)
			out->mtp_bytes += nb(xt[i]);
		if (hp->mla_kv_b)
			out->mtp_bytes += (uint64_t)hp->n_head * hp->kv_lora_rank *
			                  (hp->head_dim - hp->n_rot) * 4;
		out->mtp_kv_bytes_per_token =
		    hp->mla ? (hp->kv_lora_rank + (uint64_t)hp->n_rot) * SHOAL_MANIFEST_KV_ELT
		            : 2ull * hp->n_head_kv * hp->head_dim * SHOAL_MANIFEST_KV_ELT;
		out->mtp_shares_embd = m->nextn->embd == m->tok_embd;
	}
	return SHOAL_OK;
}

void shoal_manifest_set_model_id(shoal_manifest *mf, const shoal_model_id *id)
{
	memcpy(mf->model_id, shoal_model_id_digest(id), sizeof mf->model_id);
}

void shoal_manifest_fini(shoal_manifest *mf)
{
	if (!mf)
		return;
	free(mf->layers);
	memset(mf, 0, sizeof *mf);
}
