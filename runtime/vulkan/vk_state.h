/*
 * runtime/vulkan/vk_state.h: the instance of the Vulkan backend as the
 * core files see it (backend_vulkan.c, vk_core.c, vk_mem.c): the device,
 * the command buffer being recorded, the pipelines, the parameter ring,
 * the memory blocks and the map from device addresses to buffers. The op
 * files (vk_ops.c, vk_matmul.c, vk_attn.c) use vk_impl.h only.
 *
 * Part: runtime/ (the room vulkan/). Not a public header.
 */
#ifndef SHOAL_RUNTIME_VULKAN_VK_STATE_H
#define SHOAL_RUNTIME_VULKAN_VK_STATE_H

#include "runtime/vulkan/vk_impl.h"

#define VK_MAX_PIPES     64 /* embedded shaders with a pipeline */
#define VK_SETS_PER_POOL 512

/* A pipeline made on first use of a shader. */
typedef struct vk_pipe {
	const vk__shader *s;
	uint32_t n_bind;
	VkDescriptorSetLayout dsl;
	VkPipelineLayout layout;
	VkPipeline pipe;
	uint64_t prof_calls, prof_ns; /* SHOAL_VK_PROFILE: its timed dispatches */
} vk_pipe;

/* A host-visible buffer, mapped for the instance's life. */
typedef struct vk_hostbuf {
	VkBuffer buf;
	VkDeviceMemory mem;
	unsigned char *map;
	uint64_t bytes;
} vk_hostbuf;

/* A block of device memory; ranges are cut from it upward and the cursor
 * returns to 0 once none is live. Its buffers are windows: win[i] starts
 * at byte i * step and spans at most maxStorageBufferRange, so that a
 * binding never exceeds that range; a block no larger than the range has
 * one window over all of it, a larger one (a single large range) windows
 * that overlap by half. */
typedef struct vk_block {
	VkDeviceMemory mem;
	VkBuffer *win;
	uint32_t n_win;
	uint64_t step;
	uint64_t bytes, used;
	uint32_t live;
	bool imported; /* host pages (weights): never cut from again */
} vk_block;

/* A device address range: reserved host addresses (PROT_NONE) and where
 * the bytes lie on the device. */
typedef struct vk_region {
	uintptr_t base;
	uint64_t bytes; /* asked for */
	uint64_t span;  /* reserved (page multiple, >= 1 page) */
	uint32_t block;
	uint64_t off;
} vk_region;

struct shoal_backend {
	shoal_backend_limits lim;
	VkInstance inst;
	VkPhysicalDevice pd;
	VkPhysicalDeviceProperties props;
	VkPhysicalDeviceMemoryProperties memp;
	VkDevice dev;
	VkQueue queue;
	uint32_t qfam;
	vk__caps caps;
	uint32_t mt_dev;    /* memory type of the blocks (device-local) */
	uint32_t mt_host;   /* host-visible and coherent: params, staging */
	uint64_t max_alloc; /* maxMemoryAllocationSize */
	/* VK_EXT_external_memory_host where memory is shared (NULL: none):
	 * weights() imports the host's pages instead of copying them */
	PFN_vkGetMemoryHostPointerPropertiesEXT host_ptr_props;
	uint64_t import_align; /* minImportedHostPointerAlignment */

	/* recording */
	VkCommandPool cpool;
	VkCommandBuffer cb;
	VkFence fence;
	bool recording;
	vk_pipe pipes[VK_MAX_PIPES];
	uint32_t n_pipes;
	VkDescriptorPool *dpool; /* cap_dpool made (or VK_NULL_HANDLE), grown on demand */
	uint32_t cap_dpool;
	uint32_t n_dpool, sets_used; /* sets taken from dpool[n_dpool - 1] */
	vk_hostbuf *params;          /* cap_params, grown on demand, kept across submits */
	uint32_t cap_params;
	uint32_t n_params, params_used; /* bytes used of params[n_params - 1] */
	/* SHOAL_VK_PROFILE (vk_core.c "Profile"): a timestamp before and after
	 * each of the first prof_cap dispatches of a submit, and whose */
	VkQueryPool prof_pool;
	uint32_t prof_cap, prof_n;
	uint32_t *prof_pipe; /* (prof_cap) index into pipes */
	uint64_t *prof_ts;   /* (2 prof_cap) the timestamps read back */
	uint64_t prof_mask, prof_untimed;
	double prof_period; /* ns a tick */
	char *prof_path;    /* where the table goes at the end ("-": stderr) */

	/* memory */
	vk_hostbuf staging;
	uint64_t staging_used; /* bytes taken since the last submit */
	vk_block *blocks;
	uint32_t n_blocks;
	vk_region *regions; /* sorted by base */
	uint32_t n_regions, cap_regions;
	float *topk_rows; /* host scratch of top_k (topk_cap floats) */
	size_t topk_cap;
	/* matmul's rounded activations (vk_matmul.c): max_rows x max_n floats
	 * of the limits, in a block of their own */
	void *act_dev;
	uint64_t act_bytes;
	/* the IQ grid types' grids (vk__iq_grids), uploaded at create */
	void *iq_grids_dev;
};

/* vk_core.c: recording of copies and fills between dispatches. */
VkCommandBuffer vk__record(shoal_backend *b);
VkResult vk__hostbuf_make(shoal_backend *b, uint64_t bytes, VkBufferUsageFlags use,
                          vk_hostbuf *out);
void vk__hostbuf_free(shoal_backend *b, vk_hostbuf *h);
int32_t vk__memtype(shoal_backend *b, uint32_t bits, VkMemoryPropertyFlags want);
void vk__core_free(shoal_backend *b);
shoal_err vk__core_init(shoal_backend *b, char *why, size_t why_len);

/* vk_mem.c: blocks, regions and host <-> device bytes. */
shoal_err vk__mem_init(shoal_backend *b);
void vk__mem_free(shoal_backend *b);
shoal_err vk__region_new(shoal_backend *b, uint64_t bytes, void **dev);
/* A range in a block of its own, exactly its size (the instance's
 * scratch: never freed before the instance, so it pins no shared block). */
shoal_err vk__region_alone(shoal_backend *b, uint64_t bytes, void **dev);
/* The IQ grids' range (vk__iq_grids), made and written once at create. */
shoal_err vk__iq_grids_init(shoal_backend *b);
shoal_err vk__region_import(shoal_backend *b, const void *host, uint64_t bytes, void **dev);
void vk__region_free(shoal_backend *b, void *dev);
void vk__write(shoal_backend *b, void *dev, const void *src, size_t n);
void vk__read(shoal_backend *b, const void *dev, void *dst, size_t n);
void vk__fill_zero(shoal_backend *b, void *dev, size_t n);

/* vk_ops.c: the ops of this room's core (the ops table points at them). */
void vk__rms_norm(shoal_backend *b, const float *x, size_t ldx, const float *w, uint32_t n,
                  uint32_t n_rows, float eps, float *y, size_t ldy);
void vk__rope(shoal_backend *b, float *x, size_t ld, uint32_t n_rows, uint32_t n_head,
              uint32_t head_dim, uint32_t n_rot, const uint32_t *pos, const float *cs, bool neox);
void vk__kv_store(shoal_backend *b, shoal_dtype t, const float *src, size_t ld, uint32_t n_rows,
                  uint32_t n_head_kv, uint32_t head_dim, void *const *plane, const uint32_t *pos,
                  size_t head_ld);
void vk__add(shoal_backend *b, float *y, size_t ldy, const float *x, size_t ldx, uint32_t n,
             uint32_t n_rows);
void vk__copy(shoal_backend *b, float *dst, size_t ldd, const float *src, size_t lds, uint32_t n,
              uint32_t n_rows);
void vk__softmax(shoal_backend *b, float *x, uint32_t n, uint32_t n_rows, size_t ld);
void vk__top_k(shoal_backend *b, const float *x, uint32_t n, uint32_t n_rows, size_t ld, uint32_t k,
               int32_t *ids, float *vals);
double vk__read_gbps(shoal_backend *b);
#endif
