/*
 * runtime/vulkan/vk_impl.h: what the Vulkan backend's files share: the
 * instance (one device, one queue, one command buffer being recorded),
 * device addresses resolved to buffers, the embedded shaders and their
 * pipelines, and the recording of one dispatch. vk_core.c implements it;
 * the op files (vk_ops.c, vk_matmul.c, vk_attn.c, ...) record their
 * dispatches through it.
 *
 * Part: runtime/ (the room vulkan/; only runtime/backends.c includes its
 * public header, backend_vulkan.h). Not a public header.
 *
 * Shader conventions (runtime/vulkan/shaders/NAME.comp, compiled by glslc
 * at build time into a C array vk_spv_NAME[] and its size):
 *   - GLSL 450 with GL_EXT_shader_16bit_storage, GL_EXT_shader_8bit_storage
 *     and GL_KHR_shader_subgroup_basic/arithmetic where used (all in what
 *     MoltenVK offers: Vulkan 1.2 with 8/16-bit storage and subgroups);
 *   - descriptor set 0, binding i = the i-th buffer handed to
 *     vk__dispatch, bound whole (offset 0): a storage buffer that the
 *     shader declares with whatever element type it wants (float, uint,
 *     uint16_t, uint8_t) - the same VkBuffer may appear at several
 *     bindings;
 *   - where an operand starts inside its buffer is a push constant: in
 *     elements of the type the shader reads it as (the C side divides the
 *     byte offset from vk__at() by that size, and asserts it divides);
 *   - push constants <= 128 bytes (the minimum every device offers);
 *   - the workgroup size is fixed in the shader (local_size_x = 64, 128
 *     or 256; 32 or 64 for subgroup code, never assuming a subgroup size
 *     other than what vk__caps() reports).
 */
#ifndef SHOAL_RUNTIME_VULKAN_VK_IMPL_H
#define SHOAL_RUNTIME_VULKAN_VK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "runtime/backend.h"

/* An embedded shader: glslc's SPIR-V words and the name for messages. */
typedef struct vk__shader {
	const char *name;
	const uint32_t *spv;
	size_t bytes;
} vk__shader;

/* A device address resolved: the buffer it lies in and the byte offset
 * from that buffer's start. */
typedef struct vk__ref {
	VkBuffer buf;
	uint64_t off;
	uint64_t room; /* bytes from off to the end of the buffer */
} vk__ref;
/* (vk-core) A range larger than maxStorageBufferRange (lavapipe: 128 MiB)
 * is bound through windows: buffers over its memory that start every half
 * range and overlap. vk__at gives the window where the address lies in
 * the first half, so room is at least half the range; room ends at the
 * range's end or the window's, whichever comes first. An operand longer
 * than room (a huge matrix) must be split by the caller. */

/* What the device offers that the op files choose by. */
typedef struct vk__caps {
	uint32_t subgroup_size; /* 0: no subgroup arithmetic in compute shaders */
	bool fp16_arith;        /* shaderFloat16 */
	bool int8_arith;        /* shaderInt8 */
	uint64_t max_buffer;    /* maxStorageBufferRange */
	uint32_t max_groups[3]; /* maxComputeWorkGroupCount */
} vk__caps;

const vk__caps *vk__caps_of(shoal_backend *b);

/* The buffer and offset of a device address (an address that no buffer
 * or weights range of b holds is a caller's bug: asserted). */
vk__ref vk__at(shoal_backend *b, const void *dev);

/* Host parameters for one dispatch (positions, ids, per-row offsets):
 * bytes copied now into this submit's parameter ring; the ref to bind.
 * The offset is 16-byte aligned. */
vk__ref vk__params(shoal_backend *b, const void *src, size_t bytes);

/* Record one dispatch of shader s (its pipeline is made on first use and
 * cached per shader) with n_bind storage buffers bound whole at bindings
 * 0..n_bind-1 (n_bind <= 8), push constants of push_bytes (<= 128), and
 * groups[0..2] workgroups (each >= 1; the caller splits larger counts).
 * A compute-to-compute barrier orders it after every dispatch recorded
 * before it. */
void vk__dispatch(shoal_backend *b, const vk__shader *s, uint32_t n_bind, const VkBuffer *bind,
                  const void *push, uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz);

/* The matmul's activation scratch (vk_matmul.c rounds activation rows
 * into it for quantized weights): its device address and *bytes, at
 * least max_rows x max_n floats of the limits; the instance's for its
 * life. */
void *vk__act_scratch(shoal_backend *b, uint64_t *bytes);

/* The bindings an IQ grid type's matrix shaders take after their others
 * (shaders/mm_deq_iq.glsl): for t one of them, *grids the buffer of the
 * grids (kernels__iq_grids' tables, the instance's for its life) and 1;
 * else 0. */
uint32_t vk__iq_grids(shoal_backend *b, shoal_dtype t, VkBuffer *grids);

/* (vk_matmul.c) The activations the CPU's matmul rounds x to for weights
 * of type t (Q8_0 or Q8_K), or F32 (x as it is); and rows n_rows of x (xr:
 * element offset, ldx) rounded so, into orf (element offset: (n_rows, n)
 * packed). */
shoal_dtype vk__act_of(shoal_dtype t);
void vk__act_round(shoal_backend *b, shoal_dtype act, vk__ref xr, size_t ldx, uint32_t n,
                   uint32_t n_rows, vk__ref orf);

/* Submit what is recorded and wait for it (the sync of backend.h). */
void vk__submit_wait(shoal_backend *b);

/* The ops of the other files, as backend.h states them (the ops table in
 * vk_core.c points at these). vk_matmul.c: */
bool vk__supports_type(shoal_backend_op op, shoal_dtype t); /* MATMUL and EMBED */
void vk__matmul(shoal_backend *b, uint32_t n_mat, const shoal_backend_mat *w, const float *x,
                size_t ldx, uint32_t n_rows, float *const *y, const size_t *ldy);
void vk__embed(shoal_backend *b, shoal_dtype t, const void *table, size_t row_bytes,
               uint32_t n_embd, const int32_t *ids, uint32_t n_rows, float *out);
/* vk_attn.c: */
void vk__attention(shoal_backend *b, const shoal_backend_attn *a);
/* vk_moe.c: */
void vk__moe_ffn(shoal_backend *b, const shoal_backend_moe *m);
void vk__moe_route(shoal_backend *b, const shoal_backend_route *r);
/* vk_ops.c (vk_moe.c runs it between its expert products): */
void vk__swiglu(shoal_backend *b, const float *g, const float *u, size_t n, float *h);
void vk__add(shoal_backend *b, float *y, size_t ldy, const float *x, size_t ldx, uint32_t n,
             uint32_t n_rows);
void vk__swiglu_oai(shoal_backend *b, const float *g, const float *u, size_t n, float alpha,
                    float limit, float *h);

/* The embedded shaders (vk_shaders.c, made at build time). */
#define VK__SHADER(name) extern const vk__shader vk__sh_##name

/* The weight types the matmul and MoE shaders read, as X(shader suffix,
 * dtype): one shader of each per type (vk_matmul.c, vk_moe.c). */
#define VK__WEIGHT_TYPES(X)                                                                        \
	X(f32, SHOAL_DTYPE_F32)                                                                    \
	X(f16, SHOAL_DTYPE_F16)                                                                    \
	X(bf16, SHOAL_DTYPE_BF16)                                                                  \
	X(q8_0, SHOAL_DTYPE_Q8_0)                                                                  \
	X(q4_0, SHOAL_DTYPE_Q4_0)                                                                  \
	X(q4_k, SHOAL_DTYPE_Q4_K)                                                                  \
	X(q5_k, SHOAL_DTYPE_Q5_K)                                                                  \
	X(q6_k, SHOAL_DTYPE_Q6_K)                                                                  \
	X(mxfp4, SHOAL_DTYPE_MXFP4)                                                                \
	X(q2_k, SHOAL_DTYPE_Q2_K)                                                                  \
	X(q3_k, SHOAL_DTYPE_Q3_K)                                                                  \
	X(iq4_nl, SHOAL_DTYPE_IQ4_NL)                                                              \
	X(iq4_xs, SHOAL_DTYPE_IQ4_XS)                                                              \
	X(iq2_xxs, SHOAL_DTYPE_IQ2_XXS)                                                            \
	X(iq2_xs, SHOAL_DTYPE_IQ2_XS)                                                              \
	X(iq2_s, SHOAL_DTYPE_IQ2_S)                                                                \
	X(iq3_xxs, SHOAL_DTYPE_IQ3_XXS)                                                            \
	X(iq3_s, SHOAL_DTYPE_IQ3_S)                                                                \
	X(iq1_s, SHOAL_DTYPE_IQ1_S)                                                                \
	X(iq1_m, SHOAL_DTYPE_IQ1_M)
#endif
