/*
 * tests/helpers/plancheck.c: a small reader of the "plan" object of `shoal status
 * --json` and of the expected-output files, for the distributed shell
 * tests (no python or jq needed), built as a check program.
 *
 *   plancheck STATUS stages      print the number of stages (0: no plan)
 *   plancheck STATUS servable    print "yes" or "no: <why>"
 *   plancheck STATUS digest      print the plan digest ("none")
 *   plancheck STATUS predicted   print the plan's predicted ms per token
 *                                ("none")
 *   plancheck STATUS stage I     print the name of stage I's peer ("none")
 *   plancheck STATUS members I   print stage I's tensor group as NAME:SHARE%
 *                                words in member order ("none": one peer)
 *   plancheck STATUS spread      print the largest number of distinct peers
 *                                holding the experts of one MoE layer
 *   plancheck STATUS left NAME   print why peer NAME is left out ("none")
 *   plancheck STATUS data OBJ.F  print counter F of the plan's "data" object
 *                                OBJ (stage, experts, owner); "none" if absent
 *   plancheck STATUS model_id    print the plan object's model id ("none")
 *   plancheck STATUS weights P   print field P of the plan's "weights" object
 *                                (P: "source", "cache_hit_bytes" or "fetch.F");
 *                                "none" if absent
 *   plancheck STATUS planned     print "A B LATENCY_US BW_MB_S" per measured
 *                                link the plan used ("none" without)
 *   plancheck STATUS rtts        print "FROM TO RTT_US" per link the peers'
 *                                records carry (ids in hex; "none" without)
 *   plancheck EXPECTED ncases    print how many cases
 *   plancheck EXPECTED prompt I  print the prompt of case I
 * Exit 1 when FILE cannot be read as JSON.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: plancheck FILE CMD [ARG]\n");
		return 2;
	}
	json_error_t je;
	json_t *root = json_load_file(argv[1], 0, &je);
	if (!root) {
		fprintf(stderr, "plancheck: %s: %s\n", argv[1], je.text);
		return 1;
	}
	const char *cmd = argv[2], *arg = argc > 3 ? argv[3] : "";
	json_t *plan = json_object_get(root, "plan");
	int rc = 0;
	if (!strcmp(cmd, "stages")) {
		printf("%zu\n", json_array_size(json_object_get(plan, "stages")));
	} else if (!strcmp(cmd, "servable")) {
		const char *why = json_string_value(json_object_get(plan, "why"));
		if (json_is_true(json_object_get(plan, "servable")))
			printf("yes\n");
		else
			printf("no: %s\n", why ? why : (plan ? "?" : "no plan object"));
	} else if (!strcmp(cmd, "digest")) {
		const char *d = json_string_value(json_object_get(plan, "digest"));
		printf("%s\n", d ? d : "none");
	} else if (!strcmp(cmd, "predicted")) {
		json_t *ms = json_object_get(plan, "predicted_ms_per_token");
		if (json_is_number(ms))
			printf("%.4f\n", json_number_value(ms));
		else
			printf("none\n");
	} else if (!strcmp(cmd, "stage")) {
		json_t *st = json_array_get(json_object_get(plan, "stages"), (size_t)atoi(arg));
		const char *n = json_string_value(json_object_get(st, "name"));
		printf("%s\n", n ? n : "none");
	} else if (!strcmp(cmd, "members")) {
		json_t *st = json_array_get(json_object_get(plan, "stages"), (size_t)atoi(arg));
		json_t *ms = json_object_get(st, "members");
		for (size_t i = 0; i < json_array_size(ms); i++) {
			json_t *m = json_array_get(ms, i);
			const char *n = json_string_value(json_object_get(m, "name"));
			printf("%s%s:%.1f", i ? " " : "", n ? n : "?",
			       100.0 * json_real_value(json_object_get(m, "share")));
		}
		printf("%s\n", json_array_size(ms) ? "" : "none");
	} else if (!strcmp(cmd, "spread")) {
		size_t best = 0;
		json_t *ex = json_object_get(plan, "experts");
		for (size_t i = 0; i < json_array_size(ex); i++) {
			json_t *owners = json_object_get(json_array_get(ex, i), "owners");
			size_t n = 0;
			for (size_t j = 0; j < json_array_size(owners); j++)
				n += json_array_size(
				         json_object_get(json_array_get(owners, j), "experts")) > 0;
			if (n > best)
				best = n;
		}
		printf("%zu\n", best);
	} else if (!strcmp(cmd, "left")) {
		json_t *left = json_object_get(plan, "left_out");
		const char *why = "none";
		for (size_t i = 0; i < json_array_size(left); i++) {
			json_t *e = json_array_get(left, i);
			const char *n = json_string_value(json_object_get(e, "name"));
			if (n && !strcmp(n, arg))
				why = json_string_value(json_object_get(e, "why"));
		}
		printf("%s\n", why ? why : "?");
	} else if (!strcmp(cmd, "model_id")) {
		const char *d = json_string_value(json_object_get(plan, "model_id"));
		printf("%s\n", d ? d : "none");
	} else if (!strcmp(cmd, "weights")) {
		json_t *v = json_object_get(plan, "weights");
		if (!strncmp(arg, "fetch.", 6))
			v = json_object_get(json_object_get(v, "fetch"), arg + 6);
		else
			v = json_object_get(v, arg);
		if (json_is_integer(v))
			printf("%lld\n", (long long)json_integer_value(v));
		else if (json_is_real(v))
			printf("%.1f\n", json_real_value(v));
		else if (json_is_string(v))
			printf("%s\n", json_string_value(v));
		else if (json_is_boolean(v))
			printf("%s\n", json_is_true(v) ? "true" : "false");
		else
			printf("none\n");
	} else if (!strcmp(cmd, "planned")) {
		json_t *pl = json_object_get(plan, "planned_links");
		for (size_t i = 0; i < json_array_size(pl); i++) {
			json_t *l = json_array_get(pl, i);
			printf("%s %s %lld %lld\n", json_string_value(json_object_get(l, "a")),
			       json_string_value(json_object_get(l, "b")),
			       (long long)json_integer_value(json_object_get(l, "latency_us")),
			       (long long)json_integer_value(json_object_get(l, "bw_mb_s")));
		}
		if (!json_array_size(pl))
			printf("none\n");
	} else if (!strcmp(cmd, "rtts")) {
		json_t *peers = json_object_get(root, "peers");
		size_t n = 0;
		for (size_t i = 0; i < json_array_size(peers); i++) {
			json_t *p = json_array_get(peers, i), *ls = json_object_get(p, "links");
			for (size_t j = 0; j < json_array_size(ls); j++, n++) {
				json_t *l = json_array_get(ls, j);
				printf("%s %s %lld\n", json_string_value(json_object_get(p, "id")),
				       json_string_value(json_object_get(l, "peer")),
				       (long long)json_integer_value(json_object_get(l, "rtt_us")));
			}
		}
		if (!n)
			printf("none\n");
	} else if (!strcmp(cmd, "ncases")) {
		printf("%zu\n", json_array_size(json_object_get(root, "cases")));
	} else if (!strcmp(cmd, "prompt")) {
		json_t *c = json_array_get(json_object_get(root, "cases"), (size_t)atoi(arg));
		const char *p = json_string_value(json_object_get(c, "prompt"));
		if (p)
			printf("%s\n", p);
		else
			rc = 1;
	} else if (!strcmp(cmd, "data")) {
		char obj[32];
		const char *dot = strchr(arg, '.');
		size_t n = dot ? (size_t)(dot - arg) : 0;
		json_t *v = NULL;
		if (dot && n < sizeof obj) {
			memcpy(obj, arg, n);
			obj[n] = '\0';
			v = json_object_get(json_object_get(json_object_get(plan, "data"), obj),
			                    dot + 1);
		}
		if (json_is_integer(v))
			printf("%lld\n", (long long)json_integer_value(v));
		else
			printf("none\n");
	} else {
		fprintf(stderr, "plancheck: unknown command %s\n", cmd);
		rc = 2;
	}
	json_decref(root);
	return rc;
}
