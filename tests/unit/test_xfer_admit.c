/*
 * tests/unit/test_xfer_admit.c: admission on a data listener does not let
 * connections that know no key delay one that does (issue 9, the
 * slowloris): idle connections, partial HELLOs and garbage around a real
 * connector, which is admitted at once while handshake_ms is 2 s; each bad
 * connection is dropped (late, garbage, or the oldest of a full pending
 * set) with an ERROR frame, and its fd is closed (counted in /proc/self/fd).
 *
 * Each scenario runs to its end and cleans up whatever happens; the test
 * cases then assert on what it recorded.
 */
#include "net/xfer.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "base/log.h"
#include "tests/unit/test.h"
#include "tests/unit/test_xfer_util.h"

#define N_IDLE    20
#define N_PARTIAL 5
#define N_GARBAGE 5
#define N_BAD     (N_IDLE + N_PARTIAL + N_GARBAGE)
/* The eviction scenario: a full pending set and 16 more. */
#define N_FLOOD (SHOAL_XFER_PENDING_MAX + 16)

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own fd */
}

/* ---- the accepting thread ---- */

typedef struct acceptor {
	shoal_xfer_listener *l;
	atomic_int stop;
	atomic_int drops; /* accept calls that returned a dropped connection */
	atomic_int links;
	shoal_xfer_link *link; /* the last admitted one (earlier ones freed) */
	pthread_t th;
} acceptor;

static void *acceptor_main(void *p)
{
	acceptor *a = p;
	while (!atomic_load(&a->stop)) {
		shoal_xfer_link *k = NULL;
		char why[SHOAL_WHY_LEN];
		shoal_err e = shoal_xfer_listener_accept(a->l, 50, &k, why, sizeof why);
		if (e == SHOAL_OK) {
			shoal_xfer_link_free(a->link);
			a->link = k;
			atomic_fetch_add(&a->links, 1);
		} else if (strncmp(why, "no connection within", 20)) {
			atomic_fetch_add(&a->drops, 1);
		}
	}
	return NULL;
}

/* ---- raw clients ---- */

/* A TCP connection to port, or -1 when it is not up within 1 s (a
 * listener that does not drain its backlog); reads time out after 5 s. */
static int raw_connect(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval rt = {5, 0}, st = {1, 0}; /* Linux bounds connect by SO_SNDTIMEO */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof rt);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &st, sizeof st);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The first frame the listener sends on fd: its kind, and the status of
 * an ERROR frame in *code; -1 when none comes (closed, or 5 s). */
static int read_status(int fd, int *code)
{
	uint8_t buf[512];
	int kind = read_frame(fd, buf, sizeof buf);
	*code = kind < 0 ? -1 : buf[68];
	return kind;
}

/* The first 100 bytes of a valid HELLO frame (of 96 + 64 + 17). */
static size_t partial_hello(uint8_t *buf, size_t cap)
{
	uint8_t blk[256];
	size_t head;
	shoal_xfer_hello hl = {.max_frame = 1 << 17, .token_len = sizeof TOKEN};
	memset(hl.peer, 0xbb, SHOAL_PEER_ID_LEN);
	memcpy(hl.token, TOKEN, sizeof TOKEN);
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HELLO};
	h.payload_len = (uint32_t)shoal_xfer_hello_encode(&hl, blk, sizeof blk);
	if (shoal_xfer_frame_encode_head(&h, buf, cap, &head) || head + h.payload_len > cap)
		return 0;
	memcpy(buf + head, blk, h.payload_len);
	shoal_xfer_frame_seal(buf, head + h.payload_len); /* as the TCP transport does */
	return 100;
}

/* ---- scenarios ---- */

/* The fd count in *fds_base, then a listener (handshake_ms 2 s) on an
 * ephemeral port and its accepting thread: the port, or 0 with *e and the
 * reason in why. */
static uint16_t scenario_start(acceptor *a, int *fds_base, shoal_err *e, char *why, size_t why_len)
{
	shoal_xfer_config c;
	char r[SHOAL_WHY_LEN];
	memset(a, 0, sizeof *a);
	*fds_base = count_fds();
	cfg_small(&c, 0xaa);
	c.handshake_ms = 2000;
	*e = shoal_xfer_listener_new(&c, "127.0.0.1", 0, admit, NULL, &a->l, r, sizeof r);
	if (*e) {
		shoal_why(why, why_len, *e, "listener: %s", r);
		return 0;
	}
	pthread_create(&a->th, NULL, acceptor_main, a);
	return shoal_xfer_listener_port(a->l);
}

/* A real connector on port: the link in *b, the call's time in *ms. */
static shoal_err real_connect(uint16_t port, shoal_xfer_link **b, int64_t *ms, char *why,
                              size_t why_len)
{
	shoal_xfer_config c;
	cfg_small(&c, 0xbb);
	c.handshake_ms = 2000;
	int64_t t0 = now_ms();
	shoal_err e =
	    shoal_xfer_link_connect(&c, "127.0.0.1", port, TOKEN, sizeof TOKEN, b, why, why_len);
	*ms = now_ms() - t0;
	return e;
}

/* Stop the thread, close our n clients fd[] and both ends of the link;
 * the fd count after. */
static int scenario_end(acceptor *a, const int *fd, int n, shoal_xfer_link *b)
{
	atomic_store(&a->stop, 1);
	pthread_join(a->th, NULL);
	for (int i = 0; i < n; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	shoal_xfer_link_free(b);
	shoal_xfer_link_free(a->link);
	shoal_xfer_listener_free(a->l);
	return count_fds();
}

/* ---- scenario 1: idle, partial and garbage around a real connector ---- */

typedef struct mixed_result {
	shoal_err e_connect;
	char why[SHOAL_WHY_LEN];
	int64_t alone_ms;       /* connect call to a usable link, nothing else there */
	int64_t admit_ms;       /* the same among the bad connections */
	int links;              /* admitted by the listener: the two real ones */
	int garbage_error;      /* garbage connections told PROTO in an ERROR frame */
	int late_error;         /* idle and partial ones told TIMEOUT */
	int drops;              /* accept calls that returned a drop */
	int fds_open, fds_want; /* with every bad one dropped, the clients still open */
	int fds_end, fds_base;  /* after everything closed */
} mixed_result;

static void run_mixed(mixed_result *r)
{
	int fd[N_BAD];
	acceptor a;
	memset(r, 0, sizeof *r);
	uint16_t port = scenario_start(&a, &r->fds_base, &r->e_connect, r->why, sizeof r->why);
	if (!port)
		return;
	shoal_xfer_link *b = NULL;
	r->e_connect = real_connect(port, &b, &r->alone_ms, r->why, sizeof r->why);
	shoal_xfer_link_free(b); /* the acceptor frees its end */
	b = NULL;
	for (int i = 0; i < 200 && atomic_load(&a.links) == 0; i++)
		usleep(10000);
	int fds0 = count_fds();

	/* Garbage and partial HELLOs first, then the idle ones. */
	uint8_t part[512], junk[200];
	size_t np = partial_hello(part, sizeof part);
	memset(junk, 'G', sizeof junk);
	int n_open = 0;
	for (int i = 0; i < N_BAD; i++) {
		fd[i] = raw_connect(port);
		if (fd[i] < 0)
			continue;
		n_open++;
		if (i < N_GARBAGE)
			write_all(fd[i], junk, sizeof junk);
		else if (i < N_GARBAGE + N_PARTIAL)
			write_all(fd[i], part, np);
	}

	/* The real connector: admitted at once, not after the others' 2 s. */
	if (!r->e_connect)
		r->e_connect = real_connect(port, &b, &r->admit_ms, r->why, sizeof r->why);
	for (int i = 0; i < 200 && atomic_load(&a.links) < 2; i++)
		usleep(10000);

	/* Each bad one hears why it was dropped: garbage at once, the rest
	 * after handshake_ms (not waited for when the real one failed). */
	for (int i = 0; i < N_BAD && !r->e_connect; i++) {
		int code, kind = fd[i] >= 0 ? read_status(fd[i], &code) : -1;
		if (kind != SHOAL_XFER_KIND_ERROR)
			continue;
		if (i < N_GARBAGE)
			r->garbage_error += code == SHOAL_ERR_PROTO;
		else
			r->late_error += code == SHOAL_ERR_TIMEOUT;
	}
	for (int i = 0; i < 300 && atomic_load(&a.drops) < N_BAD && !r->e_connect; i++)
		usleep(10000);
	/* Our clients and our end of the link (the acceptor's end took the
	 * place of the first link's); none of the listener's. */
	r->fds_want = fds0 + n_open + (b != NULL);
	r->fds_open = count_fds();

	r->links = atomic_load(&a.links);
	r->drops = atomic_load(&a.drops);
	r->fds_end = scenario_end(&a, fd, N_BAD, b);
}

static void test_idle_partial_garbage_do_not_delay(void)
{
	if (count_fds() < 0)
		TEST_SKIP("no /proc/self/fd to count fds in");
	mixed_result r;
	shoal_log_level lv = shoal_log_get_level();
	shoal_log_set_level(SHOAL_LOG_ERROR); /* the expected drops */
	run_mixed(&r);
	shoal_log_set_level(lv);
	printf("  a real link admitted in %lld ms alone, in %lld ms among %d idle, %d partial "
	       "and %d garbage connections (handshake_ms 2000)\n",
	       (long long)r.alone_ms, (long long)r.admit_ms, N_IDLE, N_PARTIAL, N_GARBAGE);
	if (r.e_connect)
		fprintf(stderr, "connect: %s\n", r.why);
	ASSERT_EQ(r.e_connect, SHOAL_OK);
	ASSERT_LT(r.admit_ms, 1000);
	ASSERT_EQ(r.links, 2);
	ASSERT_EQ(r.garbage_error, N_GARBAGE);
	ASSERT_EQ(r.late_error, N_IDLE + N_PARTIAL);
	ASSERT_EQ(r.drops, N_BAD);
	ASSERT_EQ(r.fds_open, r.fds_want);
	ASSERT_EQ(r.fds_end, r.fds_base);
}

/* ---- scenario 2: more idle connections than the pending set holds ---- */

typedef struct flood_result {
	shoal_err e_connect;
	char why[SHOAL_WHY_LEN];
	int64_t admit_ms;
	int links;
	int evicted;                 /* the oldest N_FLOOD - PENDING_MAX told BUSY */
	int fds_full, fds_full_want; /* a full pending set besides our clients */
	int fds_open, fds_want;      /* every idle one dropped */
	int fds_end, fds_base;
} flood_result;

/* Poll count_fds() up to 5 s for want; the last count. */
static int fds_settle(int want)
{
	int n = count_fds();
	for (int i = 0; i < 500 && n != want; i++) {
		usleep(10000);
		n = count_fds();
	}
	return n;
}

static void run_flood(flood_result *r)
{
	static int fd[N_FLOOD];
	acceptor a;
	memset(r, 0, sizeof *r);
	uint16_t port = scenario_start(&a, &r->fds_base, &r->e_connect, r->why, sizeof r->why);
	if (!port)
		return;
	int fds0 = count_fds();
	int n_open = 0;
	int64_t t0 = now_ms();
	for (int i = 0; i < N_FLOOD; i++) { /* 3 s at most, whatever the listener does */
		fd[i] = now_ms() - t0 < 3000 ? raw_connect(port) : -1;
		n_open += fd[i] >= 0;
	}
	/* The first 16 were pushed out by the last 16, oldest first. */
	for (int i = 0; i < N_FLOOD - SHOAL_XFER_PENDING_MAX; i++) {
		int code;
		if (fd[i] >= 0 && read_status(fd[i], &code) == SHOAL_XFER_KIND_ERROR &&
		    code == SHOAL_ERR_BUSY)
			r->evicted++;
	}
	r->fds_full_want = fds0 + n_open + SHOAL_XFER_PENDING_MAX;
	r->fds_full = fds_settle(r->fds_full_want);

	shoal_xfer_link *b = NULL;
	r->e_connect = real_connect(port, &b, &r->admit_ms, r->why, sizeof r->why);
	for (int i = 0; i < 200 && atomic_load(&a.links) == 0; i++)
		usleep(10000);
	/* After handshake_ms every idle one is gone from the listener. */
	r->fds_want = fds0 + n_open + (b != NULL) + (a.link != NULL);
	r->fds_open = fds_settle(r->fds_want);

	r->links = atomic_load(&a.links);
	r->fds_end = scenario_end(&a, fd, N_FLOOD, b);
}

static void test_full_pending_set_drops_the_oldest(void)
{
	if (count_fds() < 0)
		TEST_SKIP("no /proc/self/fd to count fds in");
	flood_result r;
	shoal_log_level lv = shoal_log_get_level();
	shoal_log_set_level(SHOAL_LOG_ERROR);
	run_flood(&r);
	shoal_log_set_level(lv);
	printf("  %d idle connections (pending set of %d): the real link admitted in %lld ms\n",
	       N_FLOOD, SHOAL_XFER_PENDING_MAX, (long long)r.admit_ms);
	if (r.e_connect)
		fprintf(stderr, "connect: %s\n", r.why);
	ASSERT_EQ(r.evicted, N_FLOOD - SHOAL_XFER_PENDING_MAX);
	ASSERT_EQ(r.fds_full, r.fds_full_want);
	ASSERT_EQ(r.e_connect, SHOAL_OK);
	ASSERT_LT(r.admit_ms, 1000);
	ASSERT_EQ(r.links, 1);
	ASSERT_EQ(r.fds_open, r.fds_want);
	ASSERT_EQ(r.fds_end, r.fds_base);
}

TEST_MAIN(TEST_CASE(test_idle_partial_garbage_do_not_delay),
          TEST_CASE(test_full_pending_set_drops_the_oldest))
