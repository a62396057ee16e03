/*
 * tests/unit/test_backends.c: the registry of backend kinds
 * (runtime/backends.h): "cpu" picks the CPU backend, NULL and "auto" pick
 * the best available (the CPU, unless Vulkan is built in and this machine
 * has a Vulkan device that is not software), an unknown name is refused
 * with the known names in the reason, and every kind of the table is well
 * formed.
 */
#include "config.h"

#include <string.h>

#include "runtime/backends.h"
#include "runtime/cpu/backend_cpu.h"
#include "tests/unit/test.h"
#ifdef SHOAL_HAVE_VULKAN
#include "runtime/vulkan/backend_vulkan.h"
#define NAMES "vulkan, cpu"
#else
#define NAMES "cpu"
#endif

/* What auto should choose on this machine. */
static const shoal_backend_ops *best(void)
{
#ifdef SHOAL_HAVE_VULKAN
	char why[256];
	if (shoal_backend_vulkan_hardware(why, sizeof why))
		return shoal_backend_vulkan();
#endif
	return shoal_backend_cpu();
}

static void test_cpu_by_name(void)
{
	const shoal_backend_ops *ops = NULL;
	char why[256] = "";
	shoal_backend_opts o = {.name = "cpu"};
	ASSERT_EQ(shoal_backend_pick(&o, &ops, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(ops == shoal_backend_cpu());
	ASSERT_STR_EQ(ops->name, "cpu");
	ASSERT_EQ(ops->abi, SHOAL_BACKEND_ABI);
}

static void test_auto_picks_cpu(void)
{
	char why[256] = "";
	const shoal_backend_ops *ops = NULL;
	ASSERT_EQ(shoal_backend_pick(NULL, &ops, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(ops == best());
	ops = NULL;
	shoal_backend_opts zero = {0};
	ASSERT_EQ(shoal_backend_pick(&zero, &ops, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(ops == best());
	ops = NULL;
	shoal_backend_opts a = {.name = "auto"};
	ASSERT_EQ(shoal_backend_pick(&a, &ops, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(ops == best());
}

static void test_unknown_name(void)
{
	char why[256] = "";
	const shoal_backend_ops *ops = shoal_backend_cpu();
	shoal_backend_opts o = {.name = "cuda9"};
	ASSERT_EQ(shoal_backend_pick(&o, &ops, why, sizeof why), SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(ops == shoal_backend_cpu()); /* *out untouched */
	ASSERT_STR_EQ(why, "unknown backend 'cuda9' (this build has: auto, " NAMES ")");
	/* names are exact: no case folding, no prefixes */
	o.name = "CPU";
	ASSERT_EQ(shoal_backend_pick(&o, &ops, why, sizeof why), SHOAL_ERR_NOTFOUND);
	o.name = "";
	ASSERT_EQ(shoal_backend_pick(&o, &ops, why, sizeof why), SHOAL_ERR_NOTFOUND);
	/* no reason buffer is fine */
	o.name = "nope";
	ASSERT_EQ(shoal_backend_pick(&o, &ops, NULL, 0), SHOAL_ERR_NOTFOUND);
}

static void test_table(void)
{
	size_t n = 0;
	const shoal_backend_kind *k = shoal_backend_kinds(&n);
	ASSERT_GE(n, 1);
	/* the CPU is always there and last: "auto" can always fall back to it */
	ASSERT_STR_EQ(k[n - 1].name, "cpu");
	ASSERT_TRUE(k[n - 1].available == NULL);
	for (size_t i = 0; i < n; i++) {
		ASSERT_TRUE(k[i].name && k[i].what && k[i].ops);
		ASSERT_TRUE(strcmp(k[i].name, "auto") != 0);
		ASSERT_STR_EQ(k[i].ops()->name, k[i].name);
		ASSERT_EQ(k[i].ops()->abi, SHOAL_BACKEND_ABI);
		for (size_t j = 0; j < i; j++)
			ASSERT_TRUE(strcmp(k[i].name, k[j].name) != 0);
	}
	char names[64];
	ASSERT_STR_EQ(shoal_backend_names(names, sizeof names), NAMES);
	char tiny[2];
	char first[2] = {NAMES[0], '\0'};
	ASSERT_STR_EQ(shoal_backend_names(tiny, sizeof tiny), first); /* cut, terminated */
}

TEST_MAIN(TEST_CASE(test_cpu_by_name), TEST_CASE(test_auto_picks_cpu), TEST_CASE(test_unknown_name),
          TEST_CASE(test_table))
