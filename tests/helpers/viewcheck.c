/*
 * tests/helpers/viewcheck.c: a small reader of `shoal status --json` for the shell
 * tests (no python or jq needed), built as a check program.
 *
 *   viewcheck FILE schema        exit 0 if every peer has the documented
 *                                fields with the right types (cmd_status.c)
 *   viewcheck FILE count STATE   print how many peers are in STATE ("all": any)
 *   viewcheck FILE named NAME    print how many entries carry NAME
 *   viewcheck FILE state NAME    print the state of the peer NAME ("none")
 *   viewcheck FILE id NAME       print its id
 *   viewcheck FILE inc NAME      print its incarnation
 *   viewcheck FILE links NAME    print how many measured links its record has
 *   viewcheck FILE dsuspects NAME  print the names of the peers whose data plane
 *                                NAME's record names failing, one a line
 *   viewcheck FILE compat NAME   print "yes", or "no: <why_incompatible>", or "none"
 *   viewcheck FILE devices NAME  print "backend:kind" per device of its record, the
 *                                first followed by ":probe" when its GB/s and
 *                                GFLOP/s are the compute probe's
 *   viewcheck FILE summary       print "name:state:incarnation" per peer, sorted by id
 * Exit 1 when FILE is not a status object.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static json_t *find_peer(json_t *peers, const char *name)
{
	for (size_t i = 0; i < json_array_size(peers); i++) {
		json_t *p = json_array_get(peers, i);
		const char *n = json_string_value(json_object_get(p, "name"));
		if (n && !strcmp(n, name))
			return p;
	}
	return NULL;
}

static int check_schema(json_t *peers)
{
	static const char *states[] = {"alive", "suspect", "dead", "left"};
	for (size_t i = 0; i < json_array_size(peers); i++) {
		json_t *p = json_array_get(peers, i);
		const char *id = json_string_value(json_object_get(p, "id"));
		const char *st = json_string_value(json_object_get(p, "state"));
		int ok = id && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32;
		ok = ok && json_is_string(json_object_get(p, "name"));
		int st_ok = 0;
		for (size_t k = 0; st && k < 4; k++)
			st_ok |= !strcmp(st, states[k]);
		ok = ok && st_ok && json_is_integer(json_object_get(p, "incarnation"));
		ok = ok && json_is_integer(json_object_get(p, "mem_total")) &&
		     json_is_integer(json_object_get(p, "mem_weights"));
		ok = ok && json_is_number(json_object_get(p, "compute_gb_s")) &&
		     json_is_number(json_object_get(p, "compute_gflops"));
		ok = ok && json_is_array(json_object_get(p, "devices")) &&
		     json_array_size(json_object_get(p, "devices")) >= 1;
		ok = ok && json_is_integer(json_object_get(p, "cores")) &&
		     json_is_array(json_object_get(p, "links")) &&
		     json_is_array(json_object_get(p, "data_endpoints")) &&
		     json_is_string(json_object_get(p, "control_endpoint"));
		if (!ok) {
			char *s = json_dumps(p, JSON_COMPACT);
			fprintf(stderr, "viewcheck: peer %zu lacks a documented field: %s\n", i,
			        s ? s : "?");
			free(s);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(
		    stderr,
		    "usage: viewcheck FILE schema|count S|named N|state N|id N|inc N|summary\n");
		return 2;
	}
	json_error_t err;
	json_t *root = json_load_file(argv[1], 0, &err);
	json_t *peers = root ? json_object_get(root, "peers") : NULL;
	if (!json_is_array(peers)) {
		fprintf(stderr, "viewcheck: %s: not a status object (%s)\n", argv[1],
		        root ? "no peers array" : err.text);
		json_decref(root);
		return 1;
	}
	const char *cmd = argv[2], *arg = argc > 3 ? argv[3] : "";
	int rc = 0;
	if (!strcmp(cmd, "schema")) {
		rc = check_schema(peers);
	} else if (!strcmp(cmd, "count") || !strcmp(cmd, "named")) {
		int n = 0;
		for (size_t i = 0; i < json_array_size(peers); i++) {
			json_t *p = json_array_get(peers, i);
			const char *v = json_string_value(
			    json_object_get(p, !strcmp(cmd, "count") ? "state" : "name"));
			if (!strcmp(arg, "all") || (v && !strcmp(v, arg)))
				n++;
		}
		printf("%d\n", n);
	} else if (!strcmp(cmd, "state") || !strcmp(cmd, "id")) {
		json_t *p = find_peer(peers, arg);
		const char *v = p ? json_string_value(json_object_get(p, cmd)) : NULL;
		printf("%s\n", v ? v : "none");
	} else if (!strcmp(cmd, "inc")) {
		json_t *p = find_peer(peers, arg);
		printf("%lld\n",
		       p ? (long long)json_integer_value(json_object_get(p, "incarnation")) : -1LL);
	} else if (!strcmp(cmd, "devices")) {
		json_t *p = find_peer(peers, arg), *dv = p ? json_object_get(p, "devices") : NULL;
		for (size_t i = 0; i < json_array_size(dv); i++) {
			json_t *d = json_array_get(dv, i);
			const char *b = json_string_value(json_object_get(d, "backend"));
			const char *k = json_string_value(json_object_get(d, "kind"));
			bool probe = !i &&
			             json_real_value(json_object_get(d, "read_gb_s")) ==
			                 json_real_value(json_object_get(p, "compute_gb_s")) &&
			             json_real_value(json_object_get(d, "gflops")) ==
			                 json_real_value(json_object_get(p, "compute_gflops"));
			printf("%s:%s%s\n", b ? b : "?", k ? k : "?", probe ? ":probe" : "");
		}
	} else if (!strcmp(cmd, "links")) {
		json_t *p = find_peer(peers, arg);
		printf("%zu\n", p ? json_array_size(json_object_get(p, "links")) : 0);
	} else if (!strcmp(cmd, "dsuspects")) {
		json_t *p = find_peer(peers, arg), *ids = json_object_get(p, "data_suspects");
		for (size_t i = 0; i < json_array_size(ids); i++) {
			const char *id = json_string_value(json_array_get(ids, i));
			for (size_t j = 0; id && j < json_array_size(peers); j++) {
				json_t *q = json_array_get(peers, j);
				const char *qid = json_string_value(json_object_get(q, "id"));
				if (qid && !strcmp(qid, id))
					printf("%s\n",
					       json_string_value(json_object_get(q, "name")));
			}
		}
	} else if (!strcmp(cmd, "compat")) {
		json_t *p = find_peer(peers, arg);
		if (!p)
			printf("none\n");
		else if (json_is_true(json_object_get(p, "compatible")))
			printf("yes\n");
		else
			printf("no: %s\n",
			       json_string_value(json_object_get(p, "why_incompatible"))
			           ? json_string_value(json_object_get(p, "why_incompatible"))
			           : "(no reason given)");
	} else if (!strcmp(cmd, "summary")) {
		for (size_t i = 0; i < json_array_size(peers); i++) {
			json_t *p = json_array_get(peers, i);
			printf("%s:%s:%lld\n", json_string_value(json_object_get(p, "name")),
			       json_string_value(json_object_get(p, "state")),
			       (long long)json_integer_value(json_object_get(p, "incarnation")));
		}
	} else {
		fprintf(stderr, "viewcheck: unknown command %s\n", cmd);
		rc = 2;
	}
	json_decref(root);
	return rc;
}
