/*
 * bench_switch_pair: one side of the DPDK 22.11 memif client->server pair that
 * `routeplex bench switch --compare dpdk` measures next to the switch: no switch, one memif
 * hop, DPDK's net_memif on both ends (copy mode, the PMD's default). Two processes: the
 * server receives and counts, the client sends as fast as its ring takes frames.
 *
 * Usage: bench_switch_pair <EAL args, one net_memif vdev> -- rx|tx SIZE WARMUP_S SECONDS
 *   SIZE: frame bytes without FCS (60..1514)
 * Both print "PAIR link up" once the memif connection is up.
 * rx: after the first frame, drains for WARMUP_S, then counts for SECONDS and prints
 *     RESULT rx=N seconds=S empty_polls=E polls=P
 *     then keeps draining until the client is gone (so the client never sees a full ring
 *     only because the server left).
 * tx: sends until WARMUP_S + SECONDS + 1 s after link up, then prints
 *     RESULT tx=N refused=R bursts=B full_bursts=F seconds=S
 *     A burst is "full" when the ring took fewer frames than offered: the server was behind.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#define BURST 32

static volatile uint64_t sink;

static void tx_loop(struct rte_mempool *mp, uint16_t len, double seconds)
{
	static const uint8_t hdr[14] = {2, 0, 0, 0, 0, 0xfe, 2, 0, 0, 0, 0, 1, 0x88, 0xb5};
	struct rte_mbuf *b[BURST];
	unsigned have = 0;
	uint64_t tx = 0, refused = 0, bursts = 0, full = 0;
	uint64_t hz = rte_get_timer_hz(), t0 = rte_get_timer_cycles();
	uint64_t end = t0 + (uint64_t)(seconds * (double)hz);
	while (rte_get_timer_cycles() < end) {
		/* Like testpmd's txonly: fresh mbufs, headers written, the payload left as is; the
		 * frames the ring refused are offered again. */
		if (have < BURST) {
			if (rte_pktmbuf_alloc_bulk(mp, b + have, BURST - have) == 0) {
				for (unsigned i = have; i < BURST; i++) {
					struct rte_mbuf *m = b[i];
					m->data_len = len;
					m->pkt_len = len;
					memcpy(rte_pktmbuf_mtod(m, uint8_t *), hdr, sizeof(hdr));
				}
				have = BURST;
			}
		}
		if (have == 0)
			continue;
		uint16_t s = rte_eth_tx_burst(0, 0, b, (uint16_t)have);
		bursts++;
		tx += s;
		if (s < have) {
			full++;
			refused += have - s;
			memmove(b, b + s, (have - s) * sizeof(b[0]));
		}
		have -= s;
	}
	double took = (double)(rte_get_timer_cycles() - t0) / (double)hz;
	if (have > 0)
		rte_pktmbuf_free_bulk(b, have);
	printf("RESULT tx=%lu refused=%lu bursts=%lu full_bursts=%lu seconds=%.6f\n",
	       (unsigned long)tx, (unsigned long)refused, (unsigned long)bursts,
	       (unsigned long)full, took);
}

static void rx_loop(double warm, double seconds)
{
	struct rte_mbuf *r[BURST];
	uint64_t hz = rte_get_timer_hz();
	/* Wait for the client's first frame. */
	for (;;) {
		uint16_t k = rte_eth_rx_burst(0, 0, r, BURST);
		if (k > 0) {
			rte_pktmbuf_free_bulk(r, k);
			break;
		}
	}
	uint64_t t = rte_get_timer_cycles() + (uint64_t)(warm * (double)hz);
	while (rte_get_timer_cycles() < t) {
		uint16_t k = rte_eth_rx_burst(0, 0, r, BURST);
		if (k > 0)
			rte_pktmbuf_free_bulk(r, k);
	}
	uint64_t n = 0, polls = 0, empty = 0, bytes = 0;
	uint64_t t0 = rte_get_timer_cycles(), end = t0 + (uint64_t)(seconds * (double)hz);
	while (rte_get_timer_cycles() < end) {
		uint16_t k = rte_eth_rx_burst(0, 0, r, BURST);
		polls++;
		if (k == 0) {
			empty++;
			continue;
		}
		n += k;
		/* Touch each frame's first byte, as a switch reading the MAC must. */
		for (uint16_t i = 0; i < k; i++)
			bytes += *rte_pktmbuf_mtod(r[i], uint8_t *);
		rte_pktmbuf_free_bulk(r, k);
	}
	double took = (double)(rte_get_timer_cycles() - t0) / (double)hz;
	sink = bytes;
	printf("RESULT rx=%lu seconds=%.6f empty_polls=%lu polls=%lu\n", (unsigned long)n, took,
	       (unsigned long)empty, (unsigned long)polls);
	/* Keep the ring drained until the client is done (the parent then kills this side). */
	for (;;) {
		uint16_t k = rte_eth_rx_burst(0, 0, r, BURST);
		if (k > 0)
			rte_pktmbuf_free_bulk(r, k);
		else
			usleep(100);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		printf("bench_switch_pair: EAL init failed\n");
		return 10;
	}
	argc -= ret;
	argv += ret;
	if (argc != 5 || (strcmp(argv[1], "rx") != 0 && strcmp(argv[1], "tx") != 0)) {
		printf("bench_switch_pair: usage: -- rx|tx SIZE WARMUP_S SECONDS\n");
		return 11;
	}
	int is_tx = strcmp(argv[1], "tx") == 0;
	uint16_t len = (uint16_t)atoi(argv[2]);
	double warm = atof(argv[3]), secs = atof(argv[4]);
	if (len < 60 || len > 1514) {
		printf("bench_switch_pair: SIZE %u is outside 60..1514\n", len);
		return 11;
	}
	if (rte_eth_dev_count_avail() != 1) {
		printf("bench_switch_pair: expected one port, got %u\n", rte_eth_dev_count_avail());
		return 12;
	}
	struct rte_mempool *mp = rte_pktmbuf_pool_create("mp", 8191, 256, 0,
			RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
	if (mp == NULL) {
		printf("bench_switch_pair: mempool: %s\n", rte_strerror(rte_errno));
		return 13;
	}
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	if (rte_eth_dev_configure(0, 1, 1, &conf) < 0 ||
	    rte_eth_rx_queue_setup(0, 0, 1024, rte_eth_dev_socket_id(0), NULL, mp) < 0 ||
	    rte_eth_tx_queue_setup(0, 0, 1024, rte_eth_dev_socket_id(0), NULL) < 0 ||
	    rte_eth_dev_start(0) < 0) {
		printf("bench_switch_pair: port setup failed\n");
		return 14;
	}
	uint64_t deadline = rte_get_timer_cycles() + 30 * rte_get_timer_hz();
	struct rte_eth_link link;
	do {
		memset(&link, 0, sizeof(link));
		rte_eth_link_get_nowait(0, &link);
		if (rte_get_timer_cycles() > deadline) {
			printf("bench_switch_pair: link never came up\n");
			return 16;
		}
		usleep(1000);
	} while (link.link_status != RTE_ETH_LINK_UP);
	printf("PAIR link up\n");
	if (is_tx)
		tx_loop(mp, len, warm + secs + 1.0);
	else
		rx_loop(warm, secs);
	rte_eth_dev_stop(0);
	fflush(stdout);
	_exit(0);
}
