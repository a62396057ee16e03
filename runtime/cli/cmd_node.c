/*
 * runtime/cli/cmd_node.c: `shoal node`: run one peer in the foreground.
 *
 *   shoal node [--name N] [--listen ADDR[:PORT]] [--peer HOST[:PORT] ...]
 *              [--no-mdns] [--key F] [--insecure] [--cluster NAME]
 *              [--threads T] [--backend B] [--state-dir D]
 *              [--data-listen ADDR:PORT] [-v]
 *              [--model FILE | --model-id HEX|any [--cache-max SIZE]]
 *              [--mem-limit SIZE] [--ctx N] [--sessions N] [--spread-experts]
 *              [--tensor] [--rdma-device NAME] [--rdma-gid N]
 *              [--rdma-hop-limit N] [--rdma-tclass N]
 *
 * With --model the node serves its share of that model (runtime/node/serve.h):
 * it offers min(available memory, --mem-limit) to the plan, KV for --ctx
 * tokens (default: the model's training context), and answers `shoal run
 * --peer`. With --model-id instead, it has no file: it serves that model id
 * ("any": the one the serving peers agree on) and receives the tensors of
 * its assignment from the peers into <state-dir>/weights, kept for the
 * next start within --cache-max (runtime/node/weights.h).
 *
 * The control port defaults to 47470 (SHOAL_CTL_DEFAULT_PORT), so
 * `--peer HOST` works; port 0 picks a free one. The key is --key F, else
 * <state-dir>/cluster.key; without one the node refuses to start unless
 * --insecure. SIGINT/SIGTERM leave the cluster gracefully. Hidden, for
 * tests: --gossip-ms MS (the base period of every timer).
 */
#include "config.h"

#include <getopt.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/statedir.h"
#include "net/key.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/cli_impl.h"
#include "runtime/api/api.h"
#include "runtime/node/serve.h"
#include "runtime/node/node.h"
#include "runtime/node/plan_json.h"

static volatile sig_atomic_t cmd_node_stop;

static void cmd_node_signal(int sig)
{
	(void)sig;
	cmd_node_stop = 1;
}

static void cmd_node_usage(FILE *f)
{
	char names[128];
	fprintf(f,
	        "usage: shoal node [options]\n"
	        "  --name N               human name (default: host name)\n"
	        "  --listen ADDR[:PORT]   control address (default 0.0.0.0:47470; port 0 = any)\n"
	        "  --peer HOST[:PORT]     a seed peer to join through (repeatable)\n"
	        "  --no-mdns              do not advertise or browse with mDNS/DNS-SD\n"
	        "  --gossip-ms MS         the base period of every timer (default 100; for tests)\n"
	        "  --reprobe              measure compute speed again (default: the figures\n"
	        "                         kept in the state directory, up to 7 days old)\n"
	        "  --key FILE             cluster key (default: <state-dir>/%s)\n"
	        "  --insecure             run without a key (trusted LAN only)\n"
	        "  --cluster NAME         cluster name (default \"%s\")\n"
	        "  --threads T            compute threads (default: all cores)\n"
	        "  --backend B            compute backend: auto (default: the GPUs here and\n"
	        "                         the CPU; a software Vulkan device only when named)\n"
	        "                         or %s\n"
	        "  --state-dir D          where the id and key live (default per user)\n"
	        "  --data-listen ADDR:PORT  data-plane listener (default: ephemeral)\n"
	        "  --model FILE           serve this GGUF model's share of the plan\n"
	        "  --model-id HEX|any     serve this model id without its file: fetch the\n"
	        "                         tensors of our part from the peers (any: the model\n"
	        "                         the serving peers agree on)\n"
	        "  --cache-max SIZE       bound of the fetched-weights cache (default 64G)\n"
	        "  --prefix-cache SIZE|off  KV of ended sessions each stage keeps, so that a\n"
	        "                         prompt starting with their tokens (a chat's next\n"
	        "                         turn) computes only the rest (default: the idle\n"
	        "                         session slots' KV; off: none)\n"
	        "  --speculate MODE       exact speculative decoding of the sessions this\n"
	        "                         peer owns, unless a request says otherwise: auto\n"
	        "                         (the draft model with --draft, else prompt\n"
	        "                         lookup), off (default), lookup, draft (needs\n"
	        "                         --draft), mtp (deepseek2's MTP layer); tokens equal\n"
	        "                         those without it\n"
	        "  --draft FILE           a draft model with the model's vocabulary (checked\n"
	        "                         at start), run by this peer for the sessions it\n"
	        "                         owns; alone it means --speculate auto\n"
	        "  --draft-max K          ids drafted per step at most, 1..16 (default 8)\n"
	        "  --mem-limit SIZE       memory offered at most (e.g. 20M, 8G)\n"
	        "  --ctx N                KV context per session (default: the model's, <= 4096)\n"
	        "  --sessions N           concurrent sessions per stage, 1..16 (default: as\n"
	        "                         many as memory holds; give every peer the same)\n"
	        "  --spread-experts       place each MoE layer's experts on several peers\n"
	        "  --tensor               let the scheduler split stages among tensor groups\n"
	        "                         (exact; the same on every peer, as --ctx)\n"
	        "  --link-us N            latency the plan assumes for every link, in us, in\n"
	        "                         place of the measured ones (default: measured, and\n"
	        "                         200 for a link no peer measured yet; the same on\n"
	        "                         every peer)\n"
	        "  --spin-us N            how long the data thread spins for the next frame\n"
	        "                         of a generation before it blocks, 0..100000 us\n"
	        "                         (default %u; 0: block at once; waits longer than\n"
	        "                         that block at once, and it stops by itself while\n"
	        "                         other busy threads need the cores)\n"
	        "  --rdma-device NAME     RDMA device of every data link (default: the one\n"
	        "                         on the link's interface, e.g. rdma_en3, mlx5_0)\n"
	        "  --rdma-gid N           its GID index (default: the RoCE v2 GID of the\n"
	        "                         link's address; see shoal status)\n"
	        "  --rdma-hop-limit N     hop limit of routed RoCE v2 (default 64)\n"
	        "  --rdma-tclass N        traffic class, DSCP << 2 (default 0; the fabric's\n"
	        "                         lossless class, e.g. 106 for DSCP 26)\n"
	        "  --api [HOST:]PORT      serve the OpenAI-compatible HTTP API there (port %u;\n"
	        "                         give 0.0.0.0:PORT to serve other machines)\n"
	        "  --api-key FILE         requests must carry Authorization: Bearer <its text>\n"
	        "  --api-cors ORIGIN      let web pages from ORIGIN (e.g. http://localhost:3000,\n"
	        "                         or *) call the API: CORS headers and preflights\n"
	        "  -v, --verbose          debug logs\n",
	        SHOAL_KEY_DEFAULT_NAME, SHOAL_NODE_DEFAULT_CLUSTER,
	        shoal_backend_names(names, sizeof names), SHOAL_SERVE_HOP_SPIN_US,
	        SHOAL_API_DEFAULT_PORT);
}

/* The API key: the file's first line, 8..255 bytes. 0 on success. */
static int read_api_key(const char *path, char *key, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "shoal node: --api-key %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!fgets(key, (int)cap, f))
		key[0] = '\0';
	fclose(f);
	key[strcspn(key, "\r\n")] = '\0';
	if (strlen(key) < 8) {
		fprintf(stderr,
		        "shoal node: --api-key %s: the key must be 8 to %zu bytes on its first "
		        "line\n",
		        path, cap - 1);
		return -1;
	}
	return 0;
}

int shoal_cmd_node(int argc, char **argv)
{
	const char *api_key_file = NULL;
	char api_key[256];
	enum {
		O_NAME = 256,
		O_LISTEN,
		O_PEER,
		O_NOMDNS,
		O_REPROBE,
		O_KEY,
		O_INSECURE,
		O_CLUSTER,
		O_THREADS,
		O_STATE,
		O_DATA,
		O_GOSSIP,
		O_MODEL,
		O_MEMLIMIT,
		O_CTX,
		O_SPREAD,
		O_TENSOR,
		O_LINK_US,
		O_SPIN_US,
		O_PREFIX_CACHE,
		O_SPECULATE,
		O_DRAFT_MAX,
		O_DRAFT,
		O_SESSIONS,
		O_API,
		O_API_KEY,
		O_API_CORS,
		O_MODELID,
		O_CACHEMAX,
		O_RDMA_DEV,
		O_RDMA_GID,
		O_RDMA_HOP,
		O_RDMA_TCLASS,
		O_BACKEND
	};
	static const struct option opts[] = {
	    {"name", required_argument, NULL, O_NAME},
	    {"listen", required_argument, NULL, O_LISTEN},
	    {"peer", required_argument, NULL, O_PEER},
	    {"no-mdns", no_argument, NULL, O_NOMDNS},
	    {"reprobe", no_argument, NULL, O_REPROBE},
	    {"key", required_argument, NULL, O_KEY},
	    {"insecure", no_argument, NULL, O_INSECURE},
	    {"cluster", required_argument, NULL, O_CLUSTER},
	    {"threads", required_argument, NULL, O_THREADS},
	    {"backend", required_argument, NULL, O_BACKEND},
	    {"state-dir", required_argument, NULL, O_STATE},
	    {"data-listen", required_argument, NULL, O_DATA},
	    {"gossip-ms", required_argument, NULL, O_GOSSIP},
	    {"model", required_argument, NULL, O_MODEL},
	    {"mem-limit", required_argument, NULL, O_MEMLIMIT},
	    {"ctx", required_argument, NULL, O_CTX},
	    {"spread-experts", no_argument, NULL, O_SPREAD},
	    {"tensor", no_argument, NULL, O_TENSOR},
	    {"link-us", required_argument, NULL, O_LINK_US},
	    {"spin-us", required_argument, NULL, O_SPIN_US},
	    {"prefix-cache", required_argument, NULL, O_PREFIX_CACHE},
	    {"speculate", required_argument, NULL, O_SPECULATE},
	    {"draft-max", required_argument, NULL, O_DRAFT_MAX},
	    {"draft", required_argument, NULL, O_DRAFT},
	    {"sessions", required_argument, NULL, O_SESSIONS},
	    {"api", required_argument, NULL, O_API},
	    {"api-key", required_argument, NULL, O_API_KEY},
	    {"api-cors", required_argument, NULL, O_API_CORS},
	    {"model-id", required_argument, NULL, O_MODELID},
	    {"cache-max", required_argument, NULL, O_CACHEMAX},
	    {"rdma-device", required_argument, NULL, O_RDMA_DEV},
	    {"rdma-gid", required_argument, NULL, O_RDMA_GID},
	    {"rdma-hop-limit", required_argument, NULL, O_RDMA_HOP},
	    {"rdma-tclass", required_argument, NULL, O_RDMA_TCLASS},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	shoal_node_config cfg = {0};
	const char *key_file = NULL, *state_dir = NULL;
	const char **seeds = calloc((size_t)argc + 1, sizeof *seeds);
	int insecure = 0, c, rc = 1;
	bool spec_given = false;
	char dir[1024], why[SHOAL_WHY_WRAP_LEN] = "";
	shoal_key key;
	shoal_node *node = NULL;
	if (!seeds)
		return 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (c) {
		case O_NAME:
			cfg.name = optarg;
			break;
		case O_LISTEN:
			cfg.listen = optarg;
			break;
		case O_PEER:
			seeds[cfg.n_seeds++] = optarg;
			break;
		case O_REPROBE:
			cfg.reprobe = 1;
			break;
		case O_NOMDNS:
			cfg.no_mdns = 1;
			break;
		case O_KEY:
			key_file = optarg;
			break;
		case O_INSECURE:
			insecure = 1;
			break;
		case O_CLUSTER:
			cfg.cluster = optarg;
			break;
		case O_THREADS:
			cfg.threads = atoi(optarg);
			break;
		case O_BACKEND:
			cfg.backend = optarg;
			break;
		case O_STATE:
			state_dir = optarg;
			break;
		case O_DATA:
			cfg.data_listen = optarg;
			break;
		case O_GOSSIP:
			cfg.gossip_ms = (uint32_t)atoi(optarg);
			break;
		case O_MODEL:
			cfg.model = optarg;
			break;
		case O_MEMLIMIT:
			if (shoal_cluster_parse_bytes(optarg, &cfg.mem_limit) != SHOAL_OK ||
			    !cfg.mem_limit) {
				fprintf(stderr, "shoal node: bad --mem-limit '%s'\n", optarg);
				free(seeds);
				return 2;
			}
			break;
		case O_MODELID:
			cfg.model_id = optarg;
			break;
		case O_CACHEMAX:
			if (shoal_cluster_parse_bytes(optarg, &cfg.cache_max) != SHOAL_OK ||
			    !cfg.cache_max) {
				fprintf(stderr, "shoal node: bad --cache-max '%s'\n", optarg);
				free(seeds);
				return 2;
			}
			break;
		case O_SPECULATE: {
			char sw[SHOAL_WHY_LEN];
			/* a draft model runs here with --draft FILE (checked below);
			 * mtp needs a model with an MTP layer (checked at start) */
			if (shoal_speculate_parse(optarg, &cfg.speculate, sw, sizeof sw) ||
			    (cfg.speculate != SHOAL_SPECULATE_DRAFT &&
			     cfg.speculate != SHOAL_SPECULATE_MTP &&
			     shoal_speculate_check(cfg.speculate, sw, sizeof sw))) {
				fprintf(stderr, "shoal node: %s\n", sw);
				free(seeds);
				return 2;
			}
			spec_given = true;
			break;
		}
		case O_DRAFT:
			cfg.draft = optarg;
			break;
		case O_DRAFT_MAX: {
			double v;
			if (!cli__num(optarg, 1, SHOAL_SPECULATE_DRAFT_MAX_MAX, &v) ||
			    v != (uint32_t)v) {
				fprintf(stderr, "shoal node: --draft-max wants 1..%u, not '%s'\n",
				        SHOAL_SPECULATE_DRAFT_MAX_MAX, optarg);
				free(seeds);
				return 2;
			}
			cfg.draft_max = (uint32_t)v;
			break;
		}
		case O_PREFIX_CACHE:
			if (!strcmp(optarg, "off") || !strcmp(optarg, "0"))
				cfg.prefix_cache = UINT64_MAX;
			else if (shoal_cluster_parse_bytes(optarg, &cfg.prefix_cache) != SHOAL_OK ||
			         !cfg.prefix_cache || cfg.prefix_cache == UINT64_MAX) {
				fprintf(
				    stderr,
				    "shoal node: --prefix-cache wants a size (e.g. 512M) or off, "
				    "not '%s'\n",
				    optarg);
				free(seeds);
				return 2;
			}
			break;
		case O_CTX:
			cfg.ctx = (uint32_t)atoi(optarg);
			break;
		case O_SPREAD:
			cfg.spread_experts = 1;
			break;
		case O_TENSOR:
			cfg.tensor_groups = 1;
			break;
		case O_LINK_US: {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || !*optarg || v == 0 || v > 10000000) {
				fprintf(stderr, "shoal node: --link-us wants 1..10000000\n");
				free(seeds);
				return 2;
			}
			cfg.link_us = (uint32_t)v;
			break;
		}
		case O_SPIN_US: {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || !*optarg || *optarg == '-' || v > 100000) {
				fprintf(stderr, "shoal node: --spin-us wants 0..100000, not '%s'\n",
				        optarg);
				free(seeds);
				return 2;
			}
			cfg.spin_us = v ? (int)v : -1;
			break;
		}
		case O_SESSIONS: {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			cfg.sessions = (uint32_t)v;
			if (!*optarg || *end || v < 1 || v > 16) {
				fprintf(stderr, "shoal node: --sessions wants 1..16, not '%s'\n",
				        optarg);
				free(seeds);
				return 2;
			}
			break;
		}
		case O_RDMA_DEV:
			cfg.rdma.device = optarg;
			break;
		case O_RDMA_GID:
		case O_RDMA_HOP:
		case O_RDMA_TCLASS: {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			unsigned long lo = c == O_RDMA_HOP ? 1 : 0,
			              hi = c == O_RDMA_GID ? 1023 : 255;
			if (!*optarg || *end || v < lo || v > hi) {
				fprintf(stderr, "shoal node: --%s wants %lu..%lu, not '%s'\n",
				        c == O_RDMA_GID   ? "rdma-gid"
				        : c == O_RDMA_HOP ? "rdma-hop-limit"
				                          : "rdma-tclass",
				        lo, hi, optarg);
				free(seeds);
				return 2;
			}
			if (c == O_RDMA_GID)
				cfg.rdma.gid_plus1 = (int)v + 1;
			else if (c == O_RDMA_HOP)
				cfg.rdma.hop_limit = (uint8_t)v;
			else
				cfg.rdma.tclass = (uint8_t)v;
			break;
		}
		case O_API:
			cfg.api = optarg;
			break;
		case O_API_KEY:
			api_key_file = optarg;
			break;
		case O_API_CORS:
			cfg.api_cors = optarg;
			break;
		case 'v':
			shoal_log_set_level(SHOAL_LOG_DEBUG);
			break;
		case 'h':
			cmd_node_usage(stdout);
			free(seeds);
			return 0;
		default:
			cmd_node_usage(stderr);
			free(seeds);
			return 2;
		}
	}
	/* each bad combination named, with what it needs */
	const char *bad = NULL;
	char bad_buf[SHOAL_WHY_LEN];
	if (optind < argc) {
		snprintf(bad_buf, sizeof bad_buf, "unexpected argument '%.*s'%s",
		         SHOAL_WHY_QUOTE(sizeof bad_buf, 72), argv[optind],
		         strstr(argv[optind], ".gguf")
		             ? " (a model file is given with --model FILE)"
		             : "");
		bad = bad_buf;
	} else if (key_file && insecure)
		bad = "--key and --insecure exclude each other";
	else if (cfg.threads < 0)
		bad = "--threads wants 0 (all cores) or more";
	else if ((cfg.mem_limit || cfg.ctx || cfg.sessions || cfg.spread_experts ||
	          cfg.tensor_groups || cfg.link_us) &&
	         !cfg.model && !cfg.model_id)
		bad =
		    "--mem-limit, --ctx, --sessions, --spread-experts, --tensor and --link-us need "
		    "--model FILE or --model-id HEX|any (a peer without a model only relays "
		    "membership)";
	else if (cfg.model && cfg.model_id)
		bad = "--model and --model-id exclude each other";
	else if (cfg.cache_max && !cfg.model_id)
		bad = "--cache-max needs --model-id";
	else if (cfg.gossip_ms && (cfg.gossip_ms < 5 || cfg.gossip_ms > 10000))
		bad = "--gossip-ms wants 5..10000";
	else if (cfg.speculate == SHOAL_SPECULATE_DRAFT && !cfg.draft)
		bad = "--speculate draft needs --draft FILE (a small model with the model's "
		      "vocabulary)";
	else if (cfg.draft && !cfg.model && !cfg.model_id)
		bad = "--draft needs --model FILE or --model-id HEX|any (a draft model drafts "
		      "for the runs of the model this peer serves)";
	/* --draft alone: auto, which drafts with it */
	if (cfg.draft && !spec_given)
		cfg.speculate = SHOAL_SPECULATE_AUTO;
	if (bad) {
		fprintf(stderr, "shoal node: %s (shoal node --help lists the options)\n", bad);
		free(seeds);
		return 2;
	}
	const shoal_backend_ops *backend_ops = NULL;
	if (!cli__backend("shoal node", cfg.backend, &backend_ops)) {
		free(seeds);
		return 2;
	}
	cfg.seeds = seeds;
	if (cfg.api_cors && (!cfg.api || !cfg.api_cors[0] || strpbrk(cfg.api_cors, "\r\n"))) {
		fprintf(stderr, "shoal node: --api-cors needs --api and one origin (e.g. "
		                "http://localhost:3000) or *\n");
		free(seeds);
		return 2;
	}
	if (api_key_file && !cfg.api) {
		fprintf(stderr, "shoal node: --api-key needs --api\n");
		free(seeds);
		return 2;
	}
	if (api_key_file && read_api_key(api_key_file, api_key, sizeof api_key) != 0) {
		free(seeds);
		return 2;
	}
	cfg.api_key = api_key_file ? api_key : NULL;
	if (state_dir) {
		snprintf(dir, sizeof dir, "%s", state_dir);
	} else if (shoal_state_dir_default(dir, sizeof dir) != SHOAL_OK) {
		fprintf(stderr, "shoal node: cannot find a state directory; use --state-dir\n");
		goto out;
	}
	cfg.state_dir = dir;
	/* The key: --key, else the state dir's, else --insecure, else refuse. */
	char default_key[1100];
	snprintf(default_key, sizeof default_key, "%s/%s", dir, SHOAL_KEY_DEFAULT_NAME);
	struct stat st;
	if (!key_file && !insecure && stat(default_key, &st) == 0)
		key_file = default_key;
	if (key_file) {
		int loose = 0;
		if (shoal_key_read(key_file, &key, &loose, why, sizeof why) != SHOAL_OK) {
			fprintf(stderr, "shoal node: %s\n", why);
			goto out;
		}
		if (loose)
			SHOAL_LOG_W("node", "%s is readable by others: chmod 600 it", key_file);
		char fp[17];
		shoal_key_fingerprint(&key, fp);
		SHOAL_LOG_I("node", "cluster key %s (fingerprint %s)", key_file, fp);
		cfg.key = &key;
	} else if (!insecure) {
		fprintf(stderr,
		        "shoal node: no cluster key. Make one and give it to every peer:\n"
		        "    shoal key new cluster.key\n"
		        "    shoal node --key cluster.key     (or copy it to %s)\n"
		        "or run an open cluster on a trusted LAN with --insecure.\n",
		        default_key);
		goto out;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = cmd_node_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (shoal_node_new(&cfg, &node, why, sizeof why) != SHOAL_OK) {
		fprintf(stderr, "shoal node: %s\n", why);
		goto out;
	}
	rc = shoal_node_run(node, &cmd_node_stop) == SHOAL_OK ? 0 : 1;
out:
	shoal_node_free(node);
	shoal_key_wipe(&key, sizeof key);
	free(seeds);
	return rc;
}
