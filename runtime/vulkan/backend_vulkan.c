/*
 * runtime/vulkan/backend_vulkan.c: the Vulkan backend's ops table: the
 * instance's life, its devices, buffers and weights as device address
 * ranges (vk_mem.c), and the ops of vk_ops.c, vk_matmul.c and vk_attn.c.
 *
 * Part: runtime/ (the room vulkan/).
 */
#include "runtime/vulkan/backend_vulkan.h"

#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cpu/quant.h"
#include "runtime/vulkan/vk_state.h"

#define TOPK_MIN_FLOATS 65536u /* top_k's host scratch, at least */

/* ---- availability, probed once ---------------------------------------------------------- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool probe_any, probe_hw;
static char probe_why[160], probe_hw_why[160];
/* The probe's instance, kept for the process's life: while one instance
 * lives, the loader keeps the drivers loaded, so a backend made later
 * does not load them again (Mesa's pull in LLVM: about half a second each
 * time), and a driver that leaves memory behind when it is unloaded (Mesa
 * 22.3's lavapipe: 128 bytes of LLVM's per load, which LeakSanitizer
 * reports once the library is gone) is never unloaded. */
static VkInstance probe_inst = VK_NULL_HANDLE;

static void probe(void)
{
	VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
	                         .apiVersion = VK_API_VERSION_1_2};
	VkInstanceCreateInfo ii = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
	                           .pApplicationInfo = &app};
#ifdef __APPLE__
	static const char *ext[] = {"VK_KHR_portability_enumeration"};
	ii.flags = 0x00000001;
	ii.enabledExtensionCount = 1;
	ii.ppEnabledExtensionNames = ext;
#endif
	VkInstance inst;
	VkResult r = vkCreateInstance(&ii, NULL, &inst);
	if (r) {
		snprintf(probe_why, sizeof probe_why,
		         "no Vulkan driver (vkCreateInstance: VkResult %d)", (int)r);
		snprintf(probe_hw_why, sizeof probe_hw_why, "%s", probe_why);
		return;
	}
	uint32_t n = 0;
	vkEnumeratePhysicalDevices(inst, &n, NULL);
	VkPhysicalDevice pd[16];
	if (n > 16)
		n = 16;
	if (n)
		vkEnumeratePhysicalDevices(inst, &n, pd);
	const char *soft = NULL;
	for (uint32_t i = 0; i < n; i++) {
		VkPhysicalDeviceProperties p;
		vkGetPhysicalDeviceProperties(pd[i], &p);
		if (p.apiVersion < VK_API_VERSION_1_2)
			continue;
		probe_any = true;
		if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
			soft = soft ? soft : "software";
		else
			probe_hw = true;
	}
	probe_inst = inst; /* kept: see above */
	if (!probe_any)
		snprintf(probe_why, sizeof probe_why, "no Vulkan 1.2 device (%u found)", n);
	if (!probe_hw)
		snprintf(probe_hw_why, sizeof probe_hw_why, "%s",
		         soft ? "only a software Vulkan device (ask for it with --backend vulkan)"
		              : probe_why);
}

bool shoal_backend_vulkan_available(char *why, size_t why_len)
{
	pthread_once(&probe_once, probe);
	if (!probe_any)
		snprintf(why, why_len, "%s", probe_why);
	return probe_any;
}

/* Whether the system shows a GPU at all, without loading a driver: on
 * Linux a DRM render node, an NVIDIA or AMD compute node, or WSL's GPU;
 * elsewhere (a Mac) yes. Making a Vulkan instance loads every installed
 * driver (Mesa's pull in LLVM: about half a second), which a process that
 * only asks "auto" should not pay where there is nothing to find. */
static bool gpu_node(void)
{
#ifdef __linux__
	static const char *const nodes[] = {"/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd",
	                                    "/dev/dxg"};
	for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++)
		if (!access(nodes[i], F_OK))
			return true;
	glob_t g;
	bool any = !glob("/dev/dri/renderD*", 0, NULL, &g) && g.gl_pathc > 0;
	globfree(&g);
	return any;
#else
	return true;
#endif
}

bool shoal_backend_vulkan_hardware(char *why, size_t why_len)
{
	if (!gpu_node()) {
		snprintf(why, why_len, "no GPU device node (/dev/dri/renderD*, /dev/nvidia0, ...)");
		return false;
	}
	pthread_once(&probe_once, probe);
	if (!probe_hw)
		snprintf(why, why_len, "%s", probe_hw_why);
	return probe_hw;
}

/* ---- the instance ---------------------------------------------------------------------- */

static void vk_destroy(shoal_backend *b)
{
	if (!b)
		return;
	if (b->dev) {
		vk__submit_wait(b);
		vk__mem_free(b);
	}
	vk__core_free(b);
	free(b->topk_rows);
	free(b);
}

static shoal_err vk_create(const shoal_backend_limits *lim, shoal_backend **out)
{
	*out = NULL;
	pthread_once(&probe_once, probe); /* the drivers loaded once, kept */
	shoal_backend *b = calloc(1, sizeof *b);
	if (!b)
		return SHOAL_ERR_NOMEM;
	b->lim = *lim;
	char why[160];
	shoal_err err = vk__core_init(b, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal: vulkan: %s\n", why);
		vk_destroy(b);
		return err;
	}
	b->topk_cap = lim->max_n > TOPK_MIN_FLOATS ? lim->max_n : TOPK_MIN_FLOATS;
	b->act_bytes = (uint64_t)lim->max_rows * lim->max_n * sizeof(float);
	b->act_bytes = b->act_bytes ? b->act_bytes : sizeof(float);
	if ((err = vk__mem_init(b)) || !(b->topk_rows = malloc(b->topk_cap * sizeof(float))) ||
	    (err = vk__region_alone(b, b->act_bytes, &b->act_dev)) ||
	    (err = vk__iq_grids_init(b))) {
		vk_destroy(b);
		return SHOAL_ERR_NOMEM;
	}
	*out = b;
	return SHOAL_OK;
}

/* The largest device-local heap: what weights can live in. */
static uint32_t main_heap(shoal_backend *b)
{
	uint32_t best = 0;
	for (uint32_t i = 0; i < b->memp.memoryHeapCount; i++) {
		const VkMemoryHeap *h = &b->memp.memoryHeaps[i];
		const VkMemoryHeap *o = &b->memp.memoryHeaps[best];
		bool loc = h->flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
		bool oloc = o->flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
		if ((loc && !oloc) || (loc == oloc && h->size > o->size))
			best = i;
	}
	return best;
}

/* The device shares the host's memory: an integrated or CPU device, or
 * (not a discrete card, whose BAR window may be host-visible too) its main
 * heap is host-visible as well as device-local. */
static bool unified(shoal_backend *b, uint32_t heap)
{
	VkPhysicalDeviceType t = b->props.deviceType;
	if (t == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU || t == VK_PHYSICAL_DEVICE_TYPE_CPU)
		return true;
	if (t == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU)
		return false;
	VkMemoryPropertyFlags both =
	    VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
	for (uint32_t i = 0; i < b->memp.memoryTypeCount; i++)
		if (b->memp.memoryTypes[i].heapIndex == heap &&
		    (b->memp.memoryTypes[i].propertyFlags & both) == both)
			return true;
	return false;
}

/* One device: the one the instance computes on. */
static size_t vk_devices(shoal_backend *b, bool measure, shoal_backend_device *out, size_t cap)
{
	if (!cap)
		return 1;
	memset(out, 0, sizeof *out);
	snprintf(out->name, sizeof out->name, "%.50s (vulkan)", b->props.deviceName);
	bool soft = b->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
	out->kind = soft ? SHOAL_DEVICE_CPU : SHOAL_DEVICE_GPU;
	out->software = soft;
	uint32_t heap = main_heap(b);
	out->mem_bytes = b->memp.memoryHeaps[heap].size;
	out->unified = unified(b, heap);
	if (measure)
		out->read_gbps = vk__read_gbps(b);
	return 1;
}

/* ---- memory ------------------------------------------------------------------------------ */

struct shoal_backend_buf {
	void *dev;
	size_t bytes;
};

static shoal_err vk_buf_alloc(shoal_backend *b, size_t bytes, shoal_backend_buf **out)
{
	*out = NULL;
	shoal_backend_buf *buf = calloc(1, sizeof *buf);
	if (!buf)
		return SHOAL_ERR_NOMEM;
	shoal_err err = vk__region_new(b, bytes, &buf->dev);
	if (err) {
		free(buf);
		return err;
	}
	buf->bytes = bytes;
	vk__fill_zero(b, buf->dev, bytes);
	*out = buf;
	return SHOAL_OK;
}

static void vk_buf_free(shoal_backend *b, shoal_backend_buf *buf)
{
	if (!buf)
		return;
	vk__region_free(b, buf->dev);
	free(buf);
}

static void *vk_buf_addr(shoal_backend_buf *buf)
{
	return buf->dev;
}

static void *vk_buf_host(shoal_backend_buf *buf)
{
	(void)buf;
	return NULL;
}

/* Where memory is shared and the driver can import host pages, the pages
 * themselves (no copy); else uploaded once into device memory. */
static shoal_err vk_weights(shoal_backend *b, const void *host, size_t bytes, const void **dev)
{
	void *d;
	if (!vk__region_import(b, host, bytes, &d)) {
		*dev = d;
		return SHOAL_OK;
	}
	shoal_err err = vk__region_new(b, bytes, &d);
	if (err)
		return err;
	vk__write(b, d, host, bytes);
	*dev = d;
	return SHOAL_OK;
}

static void vk_sync(shoal_backend *b)
{
	vk__submit_wait(b);
}

static bool vk_supports(shoal_backend_op op, shoal_dtype t)
{
	switch (op) {
	case SHOAL_BACKEND_OP_MATMUL:
	case SHOAL_BACKEND_OP_EMBED:
		return vk__supports_type(op, t);
	case SHOAL_BACKEND_OP_TO_F32:
		return shoal_quant_supported(t);
	case SHOAL_BACKEND_OP_KV_CACHE:
		return t == SHOAL_DTYPE_F32 || t == SHOAL_DTYPE_F16;
	case SHOAL_BACKEND_OP_ATTN_SINKS: /* shaders/attn.comp */
	case SHOAL_BACKEND_OP_SWIGLU_OAI: /* shaders/swiglu_oai.comp */
	case SHOAL_BACKEND_OP_MOE_ROUTE:  /* shaders/moe_route.comp */
	case SHOAL_BACKEND_OP_MOE_BIAS:   /* shaders/moe_bias.comp */
		return t == SHOAL_DTYPE_F32;
	case SHOAL_BACKEND_OP_ATTN_RING: /* shaders/attn.comp's slot() */
		return t == SHOAL_DTYPE_F32 || t == SHOAL_DTYPE_F16;
	}
	return false;
}

/* On the host: the CPU backend's dequantizer. */
static void vk_to_f32(shoal_dtype t, const void *src, float *dst, size_t n)
{
	shoal_dequantize_row(t, src, dst, (int64_t)n);
}

static const shoal_backend_ops vk_ops = {
    .abi = SHOAL_BACKEND_ABI,
    .name = "vulkan",
    .supports = vk_supports,
    .to_f32 = vk_to_f32,
    .create = vk_create,
    .destroy = vk_destroy,
    .devices = vk_devices,
    .matmul = vk__matmul,
    .rms_norm = vk__rms_norm,
    .rope = vk__rope,
    .attention = vk__attention,
    .kv_store = vk__kv_store,
    .swiglu = vk__swiglu,
    .swiglu_oai = vk__swiglu_oai,
    .add = vk__add,
    .copy = vk__copy,
    .embed = vk__embed,
    .softmax = vk__softmax,
    .top_k = vk__top_k,
    .moe_ffn = vk__moe_ffn,
    .moe_route = vk__moe_route,
    .buf_alloc = vk_buf_alloc,
    .buf_free = vk_buf_free,
    .buf_addr = vk_buf_addr,
    .buf_host = vk_buf_host,
    .weights = vk_weights,
    .write = vk__write,
    .read = vk__read,
    .sync = vk_sync,
};

const shoal_backend_ops *shoal_backend_vulkan(void)
{
	return &vk_ops;
}
