/*
 * runtime/vulkan/vk_mem.c: the memory of the Vulkan backend: device-local
 * blocks that buffers and weights are cut from, device addresses (host
 * address ranges reserved PROT_NONE, so that address arithmetic works and
 * a host dereference faults) resolved to a block's buffer and offset, and
 * host <-> device bytes through a host-visible staging buffer, recorded in
 * call order with the ops; and the IQ grid types' grids, uploaded once.
 *
 * Part: runtime/ (the room vulkan/).
 */
#include "runtime/vulkan/vk_state.h"
#include "runtime/cpu/kernels_iq.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BLOCK_BYTES   (256ull << 20) /* a block's size unless one range needs more */
#define RANGE_ALIGN   256ull         /* where ranges start in a block */
#define STAGING_BYTES (16u << 20)    /* host-visible bytes per copy */

shoal_err vk__mem_init(shoal_backend *b)
{
	VkResult r = vk__hostbuf_make(
	    b, STAGING_BYTES, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
	    &b->staging);
	return r ? SHOAL_ERR_NOMEM : SHOAL_OK;
}

static void block_free(shoal_backend *b, vk_block *k)
{
	for (uint32_t w = 0; w < k->n_win; w++)
		if (k->win[w])
			vkDestroyBuffer(b->dev, k->win[w], NULL);
	free(k->win);
	if (k->mem)
		vkFreeMemory(b->dev, k->mem, NULL);
	memset(k, 0, sizeof *k);
}

void vk__mem_free(shoal_backend *b)
{
	for (uint32_t i = 0; i < b->n_regions; i++)
		munmap((void *)b->regions[i].base, b->regions[i].span);
	free(b->regions);
	for (uint32_t i = 0; i < b->n_blocks; i++)
		block_free(b, &b->blocks[i]);
	free(b->blocks);
	vk__hostbuf_free(b, &b->staging);
}

static VkBuffer window_new(shoal_backend *b, uint64_t bytes, bool imported)
{
	VkExternalMemoryBufferCreateInfo ext = {
	    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
	    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
	VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
	                         .pNext = imported ? &ext : NULL,
	                         .size = bytes,
	                         .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
	                                  VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
	                                  VK_BUFFER_USAGE_TRANSFER_DST_BIT,
	                         .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
	VkBuffer buf = VK_NULL_HANDLE;
	if (vkCreateBuffer(b->dev, &bi, NULL, &buf))
		return VK_NULL_HANDLE;
	return buf;
}

/* A new block of at least bytes: its index, or -1 (no memory). Blocks
 * are BLOCK_BYTES, or the range's size where it is larger; at most one
 * allocation (maxMemoryAllocationSize). With host (aligned to
 * import_align, bytes a multiple of it): exactly those host pages,
 * imported. */
static int32_t block_new(shoal_backend *b, uint64_t bytes, const void *host, bool exact)
{
	uint64_t range = b->caps.max_buffer & ~(uint64_t)0xffff; /* 64 KiB multiples */
	uint64_t size = bytes > BLOCK_BYTES || host || exact ? bytes : BLOCK_BYTES;
	if (bytes <= range && size > range)
		size = range;
	if (!range || (b->max_alloc && size > b->max_alloc))
		return -1;
	vk_block *nb = realloc(b->blocks, (b->n_blocks + 1) * sizeof *nb);
	if (!nb)
		return -1;
	b->blocks = nb;
	vk_block k = {.bytes = size, .imported = host != NULL};
	k.step = size <= range ? size : (range / 2) & ~(uint64_t)0xffff;
	k.n_win = size <= range ? 1 : (uint32_t)((size - range + k.step - 1) / k.step + 1);
	if (!(k.win = calloc(k.n_win, sizeof *k.win)))
		return -1;
	for (uint32_t w = 0; w < k.n_win; w++) {
		uint64_t at = (uint64_t)w * k.step, len = size - at < range ? size - at : range;
		if (!(k.win[w] = window_new(b, len, host != NULL))) {
			block_free(b, &k);
			return -1;
		}
	}
	VkMemoryRequirements req;
	uint64_t alloc = size; /* covering every window's requirement */
	for (uint32_t w = k.n_win; w-- > 0;) {
		vkGetBufferMemoryRequirements(b->dev, k.win[w], &req);
		if ((uint64_t)w * k.step + req.size > alloc)
			alloc = (uint64_t)w * k.step + req.size;
	}
	int32_t mt = (req.memoryTypeBits & (1u << b->mt_dev))
	                 ? (int32_t)b->mt_dev
	                 : vk__memtype(b, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
	VkImportMemoryHostPointerInfoEXT imp = {
	    .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
	    .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
	    .pHostPointer = (void *)(uintptr_t)host};
	if (host) {
		VkMemoryHostPointerPropertiesEXT hp = {
		    .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
		mt = -1;
		if (alloc == size && !b->host_ptr_props(b->dev, imp.handleType, host, &hp))
			mt = vk__memtype(b, req.memoryTypeBits & hp.memoryTypeBits, 0);
	}
	VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
	                           .pNext = host ? &imp : NULL,
	                           .allocationSize = alloc,
	                           .memoryTypeIndex = (uint32_t)mt};
	if (mt < 0 || k.step % req.alignment || vkAllocateMemory(b->dev, &ai, NULL, &k.mem)) {
		block_free(b, &k);
		return -1;
	}
	for (uint32_t w = 0; w < k.n_win; w++)
		if (vkBindBufferMemory(b->dev, k.win[w], k.mem, (uint64_t)w * k.step)) {
			block_free(b, &k);
			return -1;
		}
	b->blocks[b->n_blocks] = k;
	return (int32_t)b->n_blocks++;
}

/* The region holding address p (base <= p <= base + bytes), or -1. */
static int32_t region_of(shoal_backend *b, uintptr_t p)
{
	uint32_t lo = 0, hi = b->n_regions; /* first region with base > p */
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (b->regions[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return -1;
	vk_region *g = &b->regions[lo - 1];
	return p - g->base <= g->bytes ? (int32_t)(lo - 1) : -1;
}

/* A region of bytes at block k's offset off: its reserved addresses. */
static shoal_err region_add(shoal_backend *b, uint32_t k, uint64_t off, uint64_t bytes, void **dev)
{
	if (b->n_regions == b->cap_regions) {
		uint32_t cap = b->cap_regions ? 2 * b->cap_regions : 64;
		vk_region *nr = realloc(b->regions, cap * sizeof *nr);
		if (!nr)
			return SHOAL_ERR_NOMEM;
		b->regions = nr;
		b->cap_regions = cap;
	}
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t span = (bytes + page) / page * page; /* one more page: never empty */
	void *base =
	    mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		return SHOAL_ERR_NOMEM;
	vk_region g = {
	    .base = (uintptr_t)base, .bytes = bytes, .span = span, .block = k, .off = off};
	b->blocks[k].live++;
	uint32_t at = 0;
	while (at < b->n_regions && b->regions[at].base < g.base)
		at++;
	memmove(&b->regions[at + 1], &b->regions[at], (b->n_regions - at) * sizeof g);
	b->regions[at] = g;
	b->n_regions++;
	*dev = base;
	return SHOAL_OK;
}

shoal_err vk__region_new(shoal_backend *b, uint64_t bytes, void **dev)
{
	*dev = NULL;
	uint64_t need = (bytes + RANGE_ALIGN - 1) & ~(RANGE_ALIGN - 1);
	if (!need)
		need = RANGE_ALIGN;
	int32_t k = -1;
	for (uint32_t i = 0; i < b->n_blocks && k < 0; i++)
		if (!b->blocks[i].imported && b->blocks[i].bytes - b->blocks[i].used >= need)
			k = (int32_t)i;
	if (k < 0 && (k = block_new(b, need, NULL, false)) < 0)
		return SHOAL_ERR_NOMEM;
	shoal_err err = region_add(b, (uint32_t)k, b->blocks[k].used, bytes, dev);
	if (!err)
		b->blocks[k].used += need;
	return err;
}

shoal_err vk__region_import(shoal_backend *b, const void *host, uint64_t bytes, void **dev)
{
	*dev = NULL;
	if (!b->host_ptr_props || !bytes)
		return SHOAL_ERR_UNSUPPORTED;
	uintptr_t a = b->import_align, lo = (uintptr_t)host / a * a;
	uint64_t size = ((uintptr_t)host + bytes - lo + a - 1) / a * a;
	int32_t k = block_new(b, size, (const void *)lo, true);
	if (k < 0)
		return SHOAL_ERR_UNSUPPORTED;
	b->blocks[k].used = size;
	return region_add(b, (uint32_t)k, (uintptr_t)host - lo, bytes, dev);
}

shoal_err vk__region_alone(shoal_backend *b, uint64_t bytes, void **dev)
{
	*dev = NULL;
	uint64_t need = (bytes + RANGE_ALIGN - 1) & ~(RANGE_ALIGN - 1);
	int32_t k = block_new(b, need ? need : RANGE_ALIGN, NULL, true);
	if (k < 0)
		return SHOAL_ERR_NOMEM;
	b->blocks[k].imported = true; /* never cut from again, like host pages */
	shoal_err err = region_add(b, (uint32_t)k, 0, bytes, dev);
	if (!err)
		b->blocks[k].used = b->blocks[k].bytes;
	return err;
}

/* The grids' tables as mm_deq_iq.glsl addresses them (IQG_*: word
 * offsets), up to the sign tables, which the shaders compute. */
#define IQ_GRIDS_BYTES offsetof(kernels__iq_grids, sign8)
_Static_assert(offsetof(kernels__iq_grids, iq2xxs) == 0 * 4 &&
                   offsetof(kernels__iq_grids, iq2xs) == 512 * 4 &&
                   offsetof(kernels__iq_grids, iq2s) == 1536 * 4 &&
                   offsetof(kernels__iq_grids, iq3xxs) == 3584 * 4 &&
                   offsetof(kernels__iq_grids, iq3s) == 3840 * 4 &&
                   offsetof(kernels__iq_grids, iq1s8) == 4352 * 4,
               "the IQ grids' offsets of shaders/mm_deq_iq.glsl");

shoal_err vk__iq_grids_init(shoal_backend *b)
{
	shoal_err err = vk__region_alone(b, IQ_GRIDS_BYTES, &b->iq_grids_dev);
	if (!err)
		vk__write(b, b->iq_grids_dev, kernels__iq_grids_get(), IQ_GRIDS_BYTES);
	return err;
}

uint32_t vk__iq_grids(shoal_backend *b, shoal_dtype t, VkBuffer *grids)
{
	if (!kernels__iq_is_grid(t))
		return 0;
	*grids = vk__at(b, b->iq_grids_dev).buf;
	return 1;
}

void *vk__act_scratch(shoal_backend *b, uint64_t *bytes)
{
	*bytes = b->act_bytes;
	return b->act_dev;
}

void vk__region_free(shoal_backend *b, void *dev)
{
	int32_t i = region_of(b, (uintptr_t)dev);
	assert(i >= 0 && b->regions[i].base == (uintptr_t)dev);
	vk_region g = b->regions[i];
	vk_block *blk = &b->blocks[g.block];
	/* ops recorded on it may still be pending: let them finish */
	vk__submit_wait(b);
	if (!--blk->live && !blk->imported)
		blk->used = 0; /* the block is empty: cut from its start again */
	munmap((void *)g.base, g.span);
	memmove(&b->regions[i], &b->regions[i + 1], (b->n_regions - i - 1) * sizeof g);
	b->n_regions--;
}

vk__ref vk__at(shoal_backend *b, const void *dev)
{
	int32_t i = region_of(b, (uintptr_t)dev);
	if (i < 0) {
		fprintf(stderr, "shoal: vulkan: %p is not a device address of this instance\n",
		        dev);
		abort();
	}
	vk_region *g = &b->regions[i];
	vk_block *k = &b->blocks[g->block];
	uint64_t d = (uintptr_t)dev - g->base, at = g->off + d;
	uint32_t w = (uint32_t)(at / k->step);
	if (w >= k->n_win)
		w = k->n_win - 1; /* the block's end: room 0 */
	uint64_t start = (uint64_t)w * k->step;
	uint64_t win_end =
	    start + b->caps.max_buffer < k->bytes ? start + b->caps.max_buffer : k->bytes;
	uint64_t room = g->bytes - d;
	if (win_end - at < room)
		room = win_end - at;
	return (vk__ref){.buf = k->win[w], .off = at - start, .room = room};
}

/* ---- bytes to and from the device ------------------------------------------------------ */

/* Room for len bytes in the staging buffer: where they go (the bytes of
 * earlier writes stay until the commands recorded so far have run). */
static uint64_t staging_take(shoal_backend *b, size_t len)
{
	if (b->staging_used + len > STAGING_BYTES)
		vk__submit_wait(b); /* resets staging_used */
	uint64_t at = b->staging_used;
	b->staging_used += (len + 15) & ~(size_t)15;
	return at;
}

void vk__write(shoal_backend *b, void *dev, const void *src, size_t n)
{
	const unsigned char *s = src;
	for (size_t done = 0; done < n;) {
		vk__ref to = vk__at(b, (unsigned char *)dev + done);
		size_t len = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
		if (len > to.room)
			len = to.room; /* the next window goes on */
		assert(len > 0);
		uint64_t at = staging_take(b, len);
		memcpy(b->staging.map + at, s + done, len);
		VkBufferCopy c = {.srcOffset = at, .dstOffset = to.off, .size = len};
		vkCmdCopyBuffer(vk__record(b), b->staging.buf, to.buf, 1, &c);
		done += len;
	}
}

void vk__read(shoal_backend *b, const void *dev, void *dst, size_t n)
{
	unsigned char *d = dst;
	for (size_t done = 0; done < n;) {
		vk__ref from = vk__at(b, (const unsigned char *)dev + done);
		size_t len = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
		if (len > from.room)
			len = from.room;
		assert(len > 0);
		uint64_t at = staging_take(b, len);
		VkBufferCopy c = {.srcOffset = from.off, .dstOffset = at, .size = len};
		vkCmdCopyBuffer(vk__record(b), from.buf, b->staging.buf, 1, &c);
		vk__submit_wait(b);
		memcpy(d + done, b->staging.map + at, len);
		done += len;
	}
}

/* Zeroes n bytes (rounded up to 4: ranges are RANGE_ALIGN multiples). */
void vk__fill_zero(shoal_backend *b, void *dev, size_t n)
{
	uint64_t total = (n + 3) & ~(uint64_t)3;
	for (uint64_t done = 0; done < total;) {
		vk__ref to = vk__at(b, (unsigned char *)dev + done);
		uint64_t len = total - done;
		if (len > to.room) /* a window's end (a 4-byte multiple) or the
		                    * range's, whose padding is the range's too */
			len = (to.room + 3) & ~(uint64_t)3;
		assert(len > 0);
		vkCmdFillBuffer(vk__record(b), to.buf, to.off, len, 0);
		done += len;
	}
}
