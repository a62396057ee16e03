/*
 * runtime/vulkan/vk_mem.c: the memory of the Vulkan backend: device-local
 * blocks that buffers and weights are cut from, device addresses (host
 * address ranges reserved PROT_NONE, so that address arithmetic works and
 * a host dereference faults) resolved to a block's buffer and offset, and
 * host <-> device bytes through a host-visible staging buffer, recorded in
 * call order with the ops.
 *
 * Part: runtime/ (the room vulkan/).
 */
#include "runtime/vulkan/vk_state.h"

#include <assert.h>
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

void vk__mem_free(shoal_backend *b)
{
	for (uint32_t i = 0; i < b->n_regions; i++)
		munmap((void *)b->regions[i].base, b->regions[i].span);
	free(b->regions);
	for (uint32_t i = 0; i < b->n_blocks; i++) {
		vkDestroyBuffer(b->dev, b->blocks[i].buf, NULL);
		vkFreeMemory(b->dev, b->blocks[i].mem, NULL);
	}
	free(b->blocks);
	vk__hostbuf_free(b, &b->staging);
}

/* A new block of at least bytes: its index, or -1 (no memory). */
static int32_t block_new(shoal_backend *b, uint64_t bytes)
{
	uint64_t size = bytes > BLOCK_BYTES ? bytes : BLOCK_BYTES;
	if (size > b->caps.max_buffer)
		size = bytes <= b->caps.max_buffer ? b->caps.max_buffer : 0;
	if (!size)
		return -1;
	vk_block *nb = realloc(b->blocks, (b->n_blocks + 1) * sizeof *nb);
	if (!nb)
		return -1;
	b->blocks = nb;
	vk_block *k = &b->blocks[b->n_blocks];
	memset(k, 0, sizeof *k);
	VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
	                         .size = size,
	                         .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
	                                  VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
	                                  VK_BUFFER_USAGE_TRANSFER_DST_BIT,
	                         .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
	if (vkCreateBuffer(b->dev, &bi, NULL, &k->buf))
		return -1;
	VkMemoryRequirements req;
	vkGetBufferMemoryRequirements(b->dev, k->buf, &req);
	int32_t mt = (req.memoryTypeBits & (1u << b->mt_dev))
	                 ? (int32_t)b->mt_dev
	                 : vk__memtype(b, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
	VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
	                           .allocationSize = req.size,
	                           .memoryTypeIndex = (uint32_t)mt};
	if (mt < 0 || vkAllocateMemory(b->dev, &ai, NULL, &k->mem)) {
		vkDestroyBuffer(b->dev, k->buf, NULL);
		return -1;
	}
	if (vkBindBufferMemory(b->dev, k->buf, k->mem, 0)) {
		vkDestroyBuffer(b->dev, k->buf, NULL);
		vkFreeMemory(b->dev, k->mem, NULL);
		return -1;
	}
	k->bytes = size;
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

shoal_err vk__region_new(shoal_backend *b, uint64_t bytes, void **dev)
{
	*dev = NULL;
	uint64_t need = (bytes + RANGE_ALIGN - 1) & ~(RANGE_ALIGN - 1);
	if (!need)
		need = RANGE_ALIGN;
	int32_t k = -1;
	for (uint32_t i = 0; i < b->n_blocks && k < 0; i++)
		if (b->blocks[i].bytes - b->blocks[i].used >= need)
			k = (int32_t)i;
	if (k < 0 && (k = block_new(b, need)) < 0)
		return SHOAL_ERR_NOMEM;
	if (b->n_regions == b->cap_regions) {
		uint32_t cap = b->cap_regions ? 2 * b->cap_regions : 64;
		vk_region *nr = realloc(b->regions, cap * sizeof *nr);
		if (!nr)
			return SHOAL_ERR_NOMEM;
		b->regions = nr;
		b->cap_regions = cap;
	}
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t span = (need + page - 1) / page * page;
	void *base =
	    mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		return SHOAL_ERR_NOMEM;
	vk_block *blk = &b->blocks[k];
	vk_region g = {.base = (uintptr_t)base,
	               .bytes = bytes,
	               .span = span,
	               .block = (uint32_t)k,
	               .off = blk->used};
	blk->used += need;
	blk->live++;
	uint32_t at = 0;
	while (at < b->n_regions && b->regions[at].base < g.base)
		at++;
	memmove(&b->regions[at + 1], &b->regions[at], (b->n_regions - at) * sizeof g);
	b->regions[at] = g;
	b->n_regions++;
	*dev = base;
	return SHOAL_OK;
}

void vk__region_free(shoal_backend *b, void *dev)
{
	int32_t i = region_of(b, (uintptr_t)dev);
	assert(i >= 0 && b->regions[i].base == (uintptr_t)dev);
	vk_region g = b->regions[i];
	vk_block *blk = &b->blocks[g.block];
	/* ops recorded on it may still be pending: let them finish */
	vk__submit_wait(b);
	if (!--blk->live)
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
	uint64_t d = (uintptr_t)dev - g->base;
	return (vk__ref){.buf = b->blocks[g->block].buf, .off = g->off + d, .room = g->bytes - d};
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
	vk__ref to = vk__at(b, dev);
	assert(n <= to.room);
	const unsigned char *s = src;
	for (size_t done = 0; done < n;) {
		size_t len = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
		uint64_t at = staging_take(b, len);
		memcpy(b->staging.map + at, s + done, len);
		VkBufferCopy c = {.srcOffset = at, .dstOffset = to.off + done, .size = len};
		vkCmdCopyBuffer(vk__record(b), b->staging.buf, to.buf, 1, &c);
		done += len;
	}
}

void vk__read(shoal_backend *b, const void *dev, void *dst, size_t n)
{
	vk__ref from = vk__at(b, dev);
	assert(n <= from.room);
	unsigned char *d = dst;
	for (size_t done = 0; done < n;) {
		size_t len = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
		uint64_t at = staging_take(b, len);
		VkBufferCopy c = {.srcOffset = from.off + done, .dstOffset = at, .size = len};
		vkCmdCopyBuffer(vk__record(b), from.buf, b->staging.buf, 1, &c);
		vk__submit_wait(b);
		memcpy(d + done, b->staging.map + at, len);
		done += len;
	}
}

void vk__fill_zero(shoal_backend *b, void *dev, size_t n)
{
	vk__ref to = vk__at(b, dev);
	uint64_t len = (n + 3) & ~(uint64_t)3; /* ranges are RANGE_ALIGN multiples */
	if (len)
		vkCmdFillBuffer(vk__record(b), to.buf, to.off, len, 0);
}
