/*
 * runtime/node/status_json.h: the per-peer objects of `shoal status
 * --json` (README.md documents the fields). net/ holds the records and
 * the membership; their JSON is the node's (jansson).
 */
#ifndef SHOAL_RUNTIME_NODE_STATUS_JSON_H
#define SHOAL_RUNTIME_NODE_STATUS_JSON_H

#include <jansson.h>

#include "net/record.h"
#include "net/swim.h"

/* The record: id (32 hex), name, cluster, versions, endpoints, memory,
 * compute, cores, os/arch, rdma, models (digest as 64 hex), load, serving
 * and readiness, links. New reference; NULL when out of memory. */
json_t *shoal_status_record_json(const shoal_record *r);

/* The record plus "state", "incarnation", "self", "compatible" and
 * "why_incompatible" (when not compatible). New reference or NULL. */
json_t *shoal_status_member_json(const shoal_swim_member *m);

#endif
