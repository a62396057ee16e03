/*
 * tests/unit/test_dist_logflood.c: a retry storm does not flood the log
 * (issue 35, item 6). A peer sends a stage 1,000 frames whose rows name a
 * session the stage does not know (as a peer retrying into a dropped
 * session does, per row); the stage drops every one (its counter says
 * so) but writes at most a line a second, and the line that follows a
 * held-back run counts it. The stage's stderr is caught in a file.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/dist/dist.h"
#include "tests/helpers/dist_cluster.h"
#include "tests/unit/test.h"

#define STORM 1000

static void test_storm(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	const uint32_t cuts[] = {3};
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 2, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, true), 0);
	char path[] = "/tmp/shoal-logflood-XXXXXX";
	int fd = mkstemp(path);
	ASSERT_TRUE(fd >= 0);
	fflush(stderr);
	int saved = dup(2);
	ASSERT_TRUE(saved >= 0);
	dup2(fd, 2);

	static float h[256];
	for (int i = 0; i < 256; i++)
		h[i] = 0.5f;
	shoal_xfer_row row = {.session = 0xdeadbeefull, .pos = 0};
	shoal_xfer_hdr hd = {.kind = SHOAL_XFER_KIND_HIDDEN,
	                     .dtype = SHOAL_XFER_DTYPE_F32,
	                     .layer_first = 0,
	                     .layer_end = 3,
	                     .dim = 256,
	                     .n_rows = 1,
	                     .rows = &row,
	                     .payload_len = 256 * 4};
	struct iovec v = {.iov_base = h, .iov_len = 256 * 4};
	char why[SHOAL_WHY_LEN];
	uint64_t t0 = shoal_clock_now_us();
	int sent = 0;
	for (int i = 0; i < STORM; i++) {
		row.pos = (uint32_t)i;
		sent += shoal_xfer_link_send(c.intruder.links[0], &hd, &v, 1, 1000, why,
		                             sizeof why) == SHOAL_OK;
	}
	shoal_dist_stage_metrics sm;
	for (int spin = 0; spin < 500; spin++) { /* until the stage took them all */
		shoal_dist_stage_metrics_get(c.st[1].st, &sm);
		if (sm.dropped >= (uint64_t)STORM)
			break;
		usleep(10000);
	}
	uint64_t secs = (shoal_clock_now_us() - t0) / 1000000u;
	dc_cluster_stop(&c);
	shoal_dist_stage_metrics_get(c.st[1].st, &sm);
	dc_cluster_down(&c);
	shoal_model_free(m);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);

	FILE *f = fopen(path, "r");
	ASSERT_TRUE(f != NULL);
	char line[1024];
	uint32_t lines = 0, counted = 0;
	while (fgets(line, sizeof line, f))
		if (strstr(line, "dropped a row of unknown session")) {
			lines++;
			counted += strstr(line, "since the last line") != NULL;
		}
	fclose(f);
	unlink(path);
	printf("%d frames of an unknown session in ~%llu s: %llu dropped, %u log line(s)\n", sent,
	       (unsigned long long)secs, (unsigned long long)sm.dropped, lines);
	ASSERT_EQ(sent, STORM);
	ASSERT_GE(sm.dropped, (uint64_t)STORM); /* every row dropped */
	ASSERT_GE(lines, 1);                    /* still said */
	ASSERT_EQ(counted, lines);              /* each line says what it held back */
	ASSERT_LE(lines, (uint32_t)secs + 2);   /* one a second */
}

TEST_MAIN(TEST_CASE(test_storm))
