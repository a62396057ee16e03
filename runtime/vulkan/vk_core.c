/*
 * runtime/vulkan/vk_core.c: the device side of vk_impl.h: the instance and
 * its one device and queue, memory types, the command buffer that ops are
 * recorded into (a barrier before every command, so each sees the ones
 * before it), pipelines made on first use of a shader, the parameter
 * ring, submit-and-wait, and the profile (SHOAL_VK_PROFILE).
 *
 * Part: runtime/ (the room vulkan/).
 */
#include "runtime/vulkan/vk_state.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARAM_CHUNK (1u << 20) /* bytes of one parameter buffer */
#define PUSH_MAX    128u
#define MAX_BIND    8u

static void die(const char *what, VkResult r)
{
	fprintf(stderr, "shoal: vulkan: %s failed (VkResult %d)\n", what, (int)r);
	abort();
}

int32_t vk__memtype(shoal_backend *b, uint32_t bits, VkMemoryPropertyFlags want)
{
	for (uint32_t i = 0; i < b->memp.memoryTypeCount; i++)
		if ((bits & (1u << i)) && (b->memp.memoryTypes[i].propertyFlags & want) == want)
			return (int32_t)i;
	return -1;
}

VkResult vk__hostbuf_make(shoal_backend *b, uint64_t bytes, VkBufferUsageFlags use, vk_hostbuf *out)
{
	memset(out, 0, sizeof *out);
	VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
	                         .size = bytes,
	                         .usage = use,
	                         .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
	VkResult r = vkCreateBuffer(b->dev, &bi, NULL, &out->buf);
	if (r)
		return r;
	VkMemoryRequirements req;
	vkGetBufferMemoryRequirements(b->dev, out->buf, &req);
	int32_t mt =
	    vk__memtype(b, req.memoryTypeBits,
	                VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
	if (mt < 0) {
		vkDestroyBuffer(b->dev, out->buf, NULL);
		out->buf = VK_NULL_HANDLE;
		return VK_ERROR_OUT_OF_DEVICE_MEMORY;
	}
	VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
	                           .allocationSize = req.size,
	                           .memoryTypeIndex = (uint32_t)mt};
	void *map = NULL;
	if ((r = vkAllocateMemory(b->dev, &ai, NULL, &out->mem)) ||
	    (r = vkBindBufferMemory(b->dev, out->buf, out->mem, 0)) ||
	    (r = vkMapMemory(b->dev, out->mem, 0, VK_WHOLE_SIZE, 0, &map))) {
		vk__hostbuf_free(b, out);
		return r;
	}
	out->map = map;
	out->bytes = bytes;
	return VK_SUCCESS;
}

void vk__hostbuf_free(shoal_backend *b, vk_hostbuf *h)
{
	if (h->buf)
		vkDestroyBuffer(b->dev, h->buf, NULL);
	if (h->mem)
		vkFreeMemory(b->dev, h->mem, NULL); /* unmaps */
	memset(h, 0, sizeof *h);
}

/* ---- the instance and the device --------------------------------------------------- */

/* Best first: a discrete GPU, an integrated one, a virtual one, the CPU. */
static int type_rank(VkPhysicalDeviceType t)
{
	switch (t) {
	case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
		return 0;
	case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
		return 1;
	case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
		return 2;
	case VK_PHYSICAL_DEVICE_TYPE_CPU:
		return 3;
	default:
		return 4;
	}
}

static bool pick_device(shoal_backend *b, char *why, size_t why_len)
{
	uint32_t n = 0;
	vkEnumeratePhysicalDevices(b->inst, &n, NULL);
	VkPhysicalDevice pd[16];
	if (n > 16)
		n = 16;
	if (!n || vkEnumeratePhysicalDevices(b->inst, &n, pd) < 0) {
		snprintf(why, why_len, "no Vulkan device");
		return false;
	}
	int best = -1, best_rank = 99;
	for (uint32_t i = 0; i < n; i++) {
		VkPhysicalDeviceProperties p;
		vkGetPhysicalDeviceProperties(pd[i], &p);
		if (p.apiVersion < VK_API_VERSION_1_2)
			continue;
		if (type_rank(p.deviceType) < best_rank) {
			best = (int)i;
			best_rank = type_rank(p.deviceType);
		}
	}
	if (best < 0) {
		snprintf(why, why_len, "no Vulkan 1.2 device among %u", n);
		return false;
	}
	b->pd = pd[best];
	vkGetPhysicalDeviceProperties(b->pd, &b->props);
	vkGetPhysicalDeviceMemoryProperties(b->pd, &b->memp);
	return true;
}

static bool pick_queue(shoal_backend *b)
{
	uint32_t n = 0;
	vkGetPhysicalDeviceQueueFamilyProperties(b->pd, &n, NULL);
	VkQueueFamilyProperties q[16];
	if (n > 16)
		n = 16;
	vkGetPhysicalDeviceQueueFamilyProperties(b->pd, &n, q);
	for (uint32_t i = 0; i < n; i++)
		if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
			b->qfam = i;
			return true;
		}
	return false;
}

static bool has_ext(VkPhysicalDevice pd, const char *name)
{
	uint32_t n = 0;
	if (vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) || !n)
		return false;
	VkExtensionProperties *e = calloc(n, sizeof *e);
	bool found = false;
	if (e && !vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e))
		for (uint32_t i = 0; i < n && !found; i++)
			found = !strcmp(e[i].extensionName, name);
	free(e);
	return found;
}

/* The logical device with the 8/16-bit storage the shaders use, and the
 * 16-bit and 8-bit arithmetic and subgroup arithmetic where offered. */
static VkResult make_device(shoal_backend *b)
{
	VkPhysicalDeviceVulkan11Features f11 = {
	    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
	VkPhysicalDeviceVulkan12Features f12 = {
	    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &f11};
	VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
	                               .pNext = &f12};
	vkGetPhysicalDeviceFeatures2(b->pd, &f);
	VkPhysicalDeviceVulkan11Features w11 = {
	    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
	    .storageBuffer16BitAccess = f11.storageBuffer16BitAccess};
	VkPhysicalDeviceVulkan12Features w12 = {
	    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
	    .pNext = &w11,
	    .storageBuffer8BitAccess = f12.storageBuffer8BitAccess,
	    .shaderFloat16 = f12.shaderFloat16,
	    .shaderInt8 = f12.shaderInt8};
	VkPhysicalDeviceFeatures2 want = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
	                                  .pNext = &w12};
	want.features.shaderInt16 = f.features.shaderInt16;
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
	                              .queueFamilyIndex = b->qfam,
	                              .queueCount = 1,
	                              .pQueuePriorities = &prio};
	/* MoltenVK's devices must be created with portability_subset named;
	 * importing host memory (zero-copy weights) where memory is shared */
	const char *ext[2];
	uint32_t n_ext = 0;
	bool host_import = false;
	if (has_ext(b->pd, "VK_KHR_portability_subset"))
		ext[n_ext++] = "VK_KHR_portability_subset";
	VkPhysicalDeviceType t = b->props.deviceType;
	if ((t == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU || t == VK_PHYSICAL_DEVICE_TYPE_CPU) &&
	    has_ext(b->pd, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME) &&
	    !getenv("SHOAL_VK_NO_IMPORT")) {
		ext[n_ext++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
		host_import = true;
	}
	VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
	                         .pNext = &want,
	                         .queueCreateInfoCount = 1,
	                         .pQueueCreateInfos = &qi,
	                         .enabledExtensionCount = n_ext,
	                         .ppEnabledExtensionNames = ext};
	VkResult r = vkCreateDevice(b->pd, &di, NULL, &b->dev);
	if (r)
		return r;
	vkGetDeviceQueue(b->dev, b->qfam, 0, &b->queue);
	if (host_import) {
		VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp = {
		    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
		VkPhysicalDeviceProperties2 p2 = {
		    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &hp};
		vkGetPhysicalDeviceProperties2(b->pd, &p2);
		b->host_ptr_props = (PFN_vkGetMemoryHostPointerPropertiesEXT)vkGetDeviceProcAddr(
		    b->dev, "vkGetMemoryHostPointerPropertiesEXT");
		b->import_align = hp.minImportedHostPointerAlignment;
		if (!b->host_ptr_props || !b->import_align)
			b->host_ptr_props = NULL;
	}

	VkPhysicalDeviceMaintenance3Properties m3 = {
	    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
	VkPhysicalDeviceSubgroupProperties sg = {
	    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &m3};
	VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
	                                  .pNext = &sg};
	vkGetPhysicalDeviceProperties2(b->pd, &p2);
	VkSubgroupFeatureFlags need =
	    VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
	bool sub = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
	           (sg.supportedOperations & need) == need;
	b->caps.subgroup_size = sub ? sg.subgroupSize : 0;
	b->caps.fp16_arith = f12.shaderFloat16;
	b->caps.int8_arith = f12.shaderInt8;
	b->caps.max_buffer = b->props.limits.maxStorageBufferRange;
	b->max_alloc = m3.maxMemoryAllocationSize;
	memcpy(b->caps.max_groups, b->props.limits.maxComputeWorkGroupCount,
	       sizeof b->caps.max_groups);
	return VK_SUCCESS;
}

/* ---- profile ----------------------------------------------------------------------------
 *
 * SHOAL_VK_PROFILE=FILE (or "-": stderr) times every dispatch with a
 * timestamp written when the commands before it are done and one when it
 * is (the barrier before each command keeps them apart): at the end of
 * the instance, FILE gets one line a shader: its dispatches, their total
 * and mean time and share. A device whose compute queue has no
 * timestamps says so instead. Up to PROF_CAP dispatches of a submit are
 * timed; more are counted as untimed. Copies and fills are not timed. */
#define PROF_CAP 4096u

static void prof_init(shoal_backend *b)
{
	const char *path = getenv("SHOAL_VK_PROFILE");
	if (!path || !*path)
		return;
	b->prof_path = strdup(path);
	uint32_t nq = 0;
	vkGetPhysicalDeviceQueueFamilyProperties(b->pd, &nq, NULL);
	VkQueueFamilyProperties qp[16];
	nq = nq < 16 ? nq : 16;
	vkGetPhysicalDeviceQueueFamilyProperties(b->pd, &nq, qp);
	uint32_t bits = b->qfam < nq ? qp[b->qfam].timestampValidBits : 0;
	if (!b->prof_path || !bits)
		return;
	VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
	                            .queryType = VK_QUERY_TYPE_TIMESTAMP,
	                            .queryCount = 2 * PROF_CAP};
	b->prof_pipe = malloc(PROF_CAP * sizeof *b->prof_pipe);
	b->prof_ts = malloc(2 * PROF_CAP * sizeof *b->prof_ts);
	if (!b->prof_pipe || !b->prof_ts || vkCreateQueryPool(b->dev, &qi, NULL, &b->prof_pool)) {
		b->prof_pool = VK_NULL_HANDLE;
		return;
	}
	b->prof_cap = PROF_CAP;
	b->prof_mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
	b->prof_period = b->props.limits.timestampPeriod;
}

/* After a submit's fence: its timed dispatches added to their pipelines. */
static void prof_collect(shoal_backend *b)
{
	if (!b->prof_n)
		return;
	uint64_t *t = b->prof_ts;
	VkResult r =
	    vkGetQueryPoolResults(b->dev, b->prof_pool, 0, 2 * b->prof_n, 2 * b->prof_n * sizeof *t,
	                          t, sizeof *t, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
	for (uint32_t i = 0; !r && i < b->prof_n; i++) {
		vk_pipe *p = &b->pipes[b->prof_pipe[i]];
		uint64_t ticks = (t[2 * i + 1] - t[2 * i]) & b->prof_mask;
		p->prof_calls++;
		p->prof_ns += (uint64_t)((double)ticks * b->prof_period);
	}
	b->prof_n = 0;
}

static int prof_cmp(const void *x, const void *y)
{
	const vk_pipe *a = *(const vk_pipe *const *)x, *c = *(const vk_pipe *const *)y;
	return a->prof_ns < c->prof_ns ? 1 : a->prof_ns > c->prof_ns ? -1 : 0;
}

static void prof_report(shoal_backend *b)
{
	if (!b->prof_path)
		return;
	FILE *f = strcmp(b->prof_path, "-") ? fopen(b->prof_path, "w") : stderr;
	if (!f) {
		fprintf(stderr, "shoal: vulkan: SHOAL_VK_PROFILE: cannot write %s\n", b->prof_path);
		return;
	}
	if (!b->prof_pool) {
		fprintf(f, "# %s: no timestamps on its compute queue\n", b->props.deviceName);
	} else {
		vk_pipe *by[VK_MAX_PIPES];
		uint64_t all = 0;
		for (uint32_t i = 0; i < b->n_pipes; i++) {
			by[i] = &b->pipes[i];
			all += b->pipes[i].prof_ns;
		}
		qsort(by, b->n_pipes, sizeof *by, prof_cmp);
		fprintf(f, "# %s: dispatch times by shader (%llu dispatches untimed)\n",
		        b->props.deviceName, (unsigned long long)b->prof_untimed);
		fprintf(f, "# %-22s %10s %12s %10s %7s\n", "shader", "calls", "total_ms", "mean_us",
		        "share");
		for (uint32_t i = 0; i < b->n_pipes && by[i]->prof_calls; i++)
			fprintf(f, "%-24s %10llu %12.3f %10.2f %6.1f%%\n", by[i]->s->name,
			        (unsigned long long)by[i]->prof_calls, by[i]->prof_ns / 1e6,
			        by[i]->prof_ns / 1e3 / by[i]->prof_calls,
			        all ? 100.0 * by[i]->prof_ns / all : 0.0);
	}
	if (f != stderr)
		fclose(f);
}

static void prof_free(shoal_backend *b)
{
	prof_report(b);
	if (b->prof_pool)
		vkDestroyQueryPool(b->dev, b->prof_pool, NULL);
	free(b->prof_pipe);
	free(b->prof_ts);
	free(b->prof_path);
	b->prof_pool = VK_NULL_HANDLE;
	b->prof_pipe = NULL;
	b->prof_ts = NULL;
	b->prof_path = NULL;
}

/* ---- the instance ----------------------------------------------------------------------- */

shoal_err vk__core_init(shoal_backend *b, char *why, size_t why_len)
{
	VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
	                         .pApplicationName = "shoal",
	                         .apiVersion = VK_API_VERSION_1_2};
	VkInstanceCreateInfo ii = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
	                           .pApplicationInfo = &app};
#ifdef __APPLE__
	/* MoltenVK is a portability implementation: the loader lists it only
	 * when asked to. */
	static const char *ext[] = {"VK_KHR_portability_enumeration"};
	ii.flags = 0x00000001; /* VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR */
	ii.enabledExtensionCount = 1;
	ii.ppEnabledExtensionNames = ext;
#endif
	VkResult r = vkCreateInstance(&ii, NULL, &b->inst);
	if (r) {
		snprintf(why, why_len, "vkCreateInstance failed (VkResult %d): no Vulkan driver?",
		         (int)r);
		b->inst = VK_NULL_HANDLE;
		return SHOAL_ERR_UNSUPPORTED;
	}
	if (!pick_device(b, why, why_len))
		return SHOAL_ERR_UNSUPPORTED;
	if (!pick_queue(b)) {
		snprintf(why, why_len, "%s has no compute queue", b->props.deviceName);
		return SHOAL_ERR_UNSUPPORTED;
	}
	if ((r = make_device(b))) {
		snprintf(why, why_len, "vkCreateDevice failed on %s (VkResult %d)",
		         b->props.deviceName, (int)r);
		b->dev = VK_NULL_HANDLE;
		return SHOAL_ERR_UNSUPPORTED;
	}
	/* blocks: device-local, preferring a type that is not host-visible
	 * (the real VRAM on a discrete card, not its BAR window) */
	int32_t mt = -1;
	for (uint32_t i = 0; i < b->memp.memoryTypeCount && mt < 0; i++) {
		VkMemoryPropertyFlags f = b->memp.memoryTypes[i].propertyFlags;
		if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) &&
		    !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
			mt = (int32_t)i;
	}
	if (mt < 0)
		mt = vk__memtype(b, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
	if (mt < 0)
		mt = 0;
	b->mt_dev = (uint32_t)mt;
	VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
	                              .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
	                              .queueFamilyIndex = b->qfam};
	VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	if ((r = vkCreateCommandPool(b->dev, &pi, NULL, &b->cpool)) ||
	    (r = vkCreateFence(b->dev, &fi, NULL, &b->fence))) {
		snprintf(why, why_len, "command pool or fence: VkResult %d", (int)r);
		return SHOAL_ERR_NOMEM;
	}
	VkCommandBufferAllocateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
	                                  .commandPool = b->cpool,
	                                  .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
	                                  .commandBufferCount = 1};
	if ((r = vkAllocateCommandBuffers(b->dev, &ci, &b->cb))) {
		snprintf(why, why_len, "command buffer: VkResult %d", (int)r);
		return SHOAL_ERR_NOMEM;
	}
	prof_init(b);
	return SHOAL_OK;
}

void vk__core_free(shoal_backend *b)
{
	if (b->dev) {
		vkDeviceWaitIdle(b->dev);
		prof_free(b);
		for (uint32_t i = 0; i < b->n_pipes; i++) {
			vkDestroyPipeline(b->dev, b->pipes[i].pipe, NULL);
			vkDestroyPipelineLayout(b->dev, b->pipes[i].layout, NULL);
			vkDestroyDescriptorSetLayout(b->dev, b->pipes[i].dsl, NULL);
		}
		for (uint32_t i = 0; i < b->cap_dpool; i++)
			if (b->dpool[i])
				vkDestroyDescriptorPool(b->dev, b->dpool[i], NULL);
		for (uint32_t i = 0; i < b->cap_params; i++)
			vk__hostbuf_free(b, &b->params[i]);
		if (b->fence)
			vkDestroyFence(b->dev, b->fence, NULL);
		if (b->cpool)
			vkDestroyCommandPool(b->dev, b->cpool, NULL);
		vkDestroyDevice(b->dev, NULL);
	}
	if (b->inst)
		vkDestroyInstance(b->inst, NULL);
	free(b->dpool);
	free(b->params);
}

/* Room for one more entry of arr (elt bytes each, *cap of them, n used):
 * grown by doubling, the new entries zeroed. Aborts without memory (an op
 * may not fail). */
static void *grow(void *arr, uint32_t *cap, uint32_t n, size_t elt)
{
	if (n < *cap)
		return arr;
	uint32_t nc = *cap ? 2 * *cap : 4;
	unsigned char *p = realloc(arr, (size_t)nc * elt);
	if (!p) {
		fprintf(stderr, "shoal: vulkan: out of host memory for the recording\n");
		abort();
	}
	memset(p + (size_t)*cap * elt, 0, (size_t)(nc - *cap) * elt);
	*cap = nc;
	return p;
}

const vk__caps *vk__caps_of(shoal_backend *b)
{
	return &b->caps;
}

/* ---- recording ------------------------------------------------------------------------ */

/* The command buffer, begun if it is not, with a barrier recorded: every
 * command after it sees what the ones before it wrote (compute and
 * transfer alike, in this submit or an earlier one). */
VkCommandBuffer vk__record(shoal_backend *b)
{
	VkResult r;
	if (!b->recording) {
		VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		                               .flags =
		                                   VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
		if ((r = vkBeginCommandBuffer(b->cb, &bi)))
			die("vkBeginCommandBuffer", r);
		b->recording = true;
		if (b->prof_pool)
			vkCmdResetQueryPool(b->cb, b->prof_pool, 0, 2 * b->prof_cap);
		/* and the barrier below too: a barrier's first scope reaches
		 * back into earlier submits (the submit itself only orders the
		 * host's writes before it) */
	}
	VkMemoryBarrier mb = {
	    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
	    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
	    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
	                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
	VkPipelineStageFlags st =
	    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
	vkCmdPipelineBarrier(b->cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
	return b->cb;
}

void vk__submit_wait(shoal_backend *b)
{
	if (!b->recording)
		return;
	VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
	                      .srcAccessMask =
	                          VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
	                      .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
	vkCmdPipelineBarrier(b->cb,
	                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
	                     VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
	VkResult r;
	if ((r = vkEndCommandBuffer(b->cb)))
		die("vkEndCommandBuffer", r);
	VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
	                   .commandBufferCount = 1,
	                   .pCommandBuffers = &b->cb};
	if ((r = vkQueueSubmit(b->queue, 1, &si, b->fence)))
		die("vkQueueSubmit", r);
	if ((r = vkWaitForFences(b->dev, 1, &b->fence, VK_TRUE, UINT64_MAX)))
		die("vkWaitForFences", r);
	vkResetFences(b->dev, 1, &b->fence);
	prof_collect(b);
	vkResetCommandBuffer(b->cb, 0);
	b->recording = false;
	/* the pools and parameter buffers stay made and are reused in order */
	for (uint32_t i = 0; i < b->n_dpool; i++)
		vkResetDescriptorPool(b->dev, b->dpool[i], 0);
	b->n_dpool = 0;
	b->sets_used = 0;
	b->n_params = 0;
	b->params_used = 0;
	b->staging_used = 0;
}

vk__ref vk__params(shoal_backend *b, const void *src, size_t bytes)
{
	size_t need = (bytes + 15) & ~(size_t)15;
	if (need > PARAM_CHUNK) {
		fprintf(stderr, "shoal: vulkan: %zu bytes of parameters in one dispatch (max %u)\n",
		        bytes, PARAM_CHUNK);
		abort();
	}
	if (!b->n_params || b->params_used + need > PARAM_CHUNK) {
		b->params = grow(b->params, &b->cap_params, b->n_params, sizeof *b->params);
		vk_hostbuf *h = &b->params[b->n_params];
		if (!h->buf) {
			VkResult r =
			    vk__hostbuf_make(b, PARAM_CHUNK, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, h);
			if (r)
				die("parameter buffer", r);
		}
		b->n_params++;
		b->params_used = 0;
	}
	vk_hostbuf *h = &b->params[b->n_params - 1];
	memcpy(h->map + b->params_used, src, bytes);
	vk__ref ref = {.buf = h->buf, .off = b->params_used, .room = PARAM_CHUNK - b->params_used};
	b->params_used += (uint32_t)need;
	return ref;
}

static vk_pipe *pipe_of(shoal_backend *b, const vk__shader *s, uint32_t n_bind)
{
	for (uint32_t i = 0; i < b->n_pipes; i++)
		if (b->pipes[i].s == s) {
			assert(b->pipes[i].n_bind == n_bind);
			return &b->pipes[i];
		}
	if (b->n_pipes == VK_MAX_PIPES)
		die("pipeline cache full", VK_ERROR_OUT_OF_HOST_MEMORY);
	vk_pipe *p = &b->pipes[b->n_pipes];
	p->s = s;
	p->n_bind = n_bind;
	VkDescriptorSetLayoutBinding lb[MAX_BIND];
	for (uint32_t i = 0; i < n_bind; i++)
		lb[i] = (VkDescriptorSetLayoutBinding){.binding = i,
		                                       .descriptorType =
		                                           VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		                                       .descriptorCount = 1,
		                                       .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
	VkDescriptorSetLayoutCreateInfo li = {
	    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
	    .bindingCount = n_bind,
	    .pBindings = lb};
	VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = PUSH_MAX};
	VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
	                               .codeSize = s->bytes,
	                               .pCode = s->spv};
	VkShaderModule mod;
	VkResult r;
	if ((r = vkCreateDescriptorSetLayout(b->dev, &li, NULL, &p->dsl)))
		die("vkCreateDescriptorSetLayout", r);
	VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
	                                  .setLayoutCount = 1,
	                                  .pSetLayouts = &p->dsl,
	                                  .pushConstantRangeCount = 1,
	                                  .pPushConstantRanges = &pr};
	if ((r = vkCreatePipelineLayout(b->dev, &pli, NULL, &p->layout)))
		die("vkCreatePipelineLayout", r);
	if ((r = vkCreateShaderModule(b->dev, &mi, NULL, &mod))) {
		fprintf(stderr, "shoal: vulkan: shader %s: ", s->name);
		die("vkCreateShaderModule", r);
	}
	VkComputePipelineCreateInfo ci = {
	    .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
	    .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
	              .stage = VK_SHADER_STAGE_COMPUTE_BIT,
	              .module = mod,
	              .pName = "main"},
	    .layout = p->layout};
	r = vkCreateComputePipelines(b->dev, VK_NULL_HANDLE, 1, &ci, NULL, &p->pipe);
	vkDestroyShaderModule(b->dev, mod, NULL);
	if (r) {
		fprintf(stderr, "shoal: vulkan: shader %s: ", s->name);
		die("vkCreateComputePipelines", r);
	}
	b->n_pipes++;
	return p;
}

static VkDescriptorSet set_alloc(shoal_backend *b, vk_pipe *p)
{
	if (!b->n_dpool || b->sets_used == VK_SETS_PER_POOL) {
		b->dpool = grow(b->dpool, &b->cap_dpool, b->n_dpool, sizeof *b->dpool);
		if (!b->dpool[b->n_dpool]) {
			VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			                           .descriptorCount = VK_SETS_PER_POOL * MAX_BIND};
			VkDescriptorPoolCreateInfo pi = {
			    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
			    .maxSets = VK_SETS_PER_POOL,
			    .poolSizeCount = 1,
			    .pPoolSizes = &ps};
			VkResult r =
			    vkCreateDescriptorPool(b->dev, &pi, NULL, &b->dpool[b->n_dpool]);
			if (r)
				die("vkCreateDescriptorPool", r);
		}
		b->n_dpool++;
		b->sets_used = 0;
	}
	VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
	                                  .descriptorPool = b->dpool[b->n_dpool - 1],
	                                  .descriptorSetCount = 1,
	                                  .pSetLayouts = &p->dsl};
	VkDescriptorSet set;
	VkResult r = vkAllocateDescriptorSets(b->dev, &ai, &set);
	if (r)
		die("vkAllocateDescriptorSets", r);
	b->sets_used++;
	return set;
}

void vk__dispatch(shoal_backend *b, const vk__shader *s, uint32_t n_bind, const VkBuffer *bind,
                  const void *push, uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz)
{
	assert(n_bind >= 1 && n_bind <= MAX_BIND && push_bytes <= PUSH_MAX);
	assert(gx >= 1 && gy >= 1 && gz >= 1);
	assert(gx <= b->caps.max_groups[0] && gy <= b->caps.max_groups[1] &&
	       gz <= b->caps.max_groups[2]);
	vk_pipe *p = pipe_of(b, s, n_bind);
	VkDescriptorSet set = set_alloc(b, p);
	VkDescriptorBufferInfo bi[MAX_BIND];
	VkWriteDescriptorSet w[MAX_BIND];
	for (uint32_t i = 0; i < n_bind; i++) {
		bi[i] = (VkDescriptorBufferInfo){
		    .buffer = bind[i], .offset = 0, .range = VK_WHOLE_SIZE};
		w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
		                              .dstSet = set,
		                              .dstBinding = i,
		                              .descriptorCount = 1,
		                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		                              .pBufferInfo = &bi[i]};
	}
	vkUpdateDescriptorSets(b->dev, n_bind, w, 0, NULL);
	VkCommandBuffer cb = vk__record(b);
	vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe);
	vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
	if (push_bytes)
		vkCmdPushConstants(cb, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
	bool timed = b->prof_pool && b->prof_n < b->prof_cap;
	if (timed)
		vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b->prof_pool,
		                    2 * b->prof_n);
	vkCmdDispatch(cb, gx, gy, gz);
	if (timed) {
		vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b->prof_pool,
		                    2 * b->prof_n + 1);
		b->prof_pipe[b->prof_n++] = (uint32_t)(p - b->pipes);
	} else if (b->prof_pool) {
		b->prof_untimed++;
	}
}
