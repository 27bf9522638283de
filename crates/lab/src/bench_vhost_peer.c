/*
 * bench_vhost_peer: the DPDK side of `routeplex bench vhost`. Two ethdev ports of any PMD
 * (virtio_user on routeplex's vhost-user ports, or net_memif on its memif ports), both members
 * of one routeplex learning switch: port 1 announces the sink MAC, then port 0 sends unicast
 * frames to it as fast as it can for the given seconds while port 1 counts what arrives.
 *
 * Usage: bench_vhost_peer <EAL args> -- SIZE WARMUP_S SECONDS
 *   SIZE: frame bytes without FCS (60..1514)
 * Prints one line: RESULT tx=N tx_refused=R rx=M seconds=S
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
static const uint8_t SINK[6] = {2, 0, 0, 0, 0, 0xfe};
static const uint8_t GEN[6] = {2, 0, 0, 0, 0, 0x01};

static struct rte_mbuf *frame(struct rte_mempool *mp, const uint8_t *dst, const uint8_t *src,
			      uint16_t len)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
	if (m == NULL)
		return NULL;
	uint8_t *d = (uint8_t *)rte_pktmbuf_append(m, len);
	memset(d, 0, len);
	memcpy(d, dst, 6);
	memcpy(d + 6, src, 6);
	d[12] = 0x88;
	d[13] = 0xb5;
	return m;
}

static uint64_t drain(uint16_t port, uint64_t ms)
{
	struct rte_mbuf *rx[BURST];
	uint64_t end = rte_get_timer_cycles() + ms * rte_get_timer_hz() / 1000, n = 0;
	while (rte_get_timer_cycles() < end) {
		uint16_t k = rte_eth_rx_burst(port, 0, rx, BURST);
		n += k;
		for (uint16_t i = 0; i < k; i++)
			rte_pktmbuf_free(rx[i]);
	}
	return n;
}

static void blast(struct rte_mempool *mp, uint16_t len, double seconds, uint64_t *tx,
		  uint64_t *refused, uint64_t *rx_n, double *took)
{
	struct rte_mbuf *b[BURST], *rx[BURST];
	uint64_t hz = rte_get_timer_hz(), t0 = rte_get_timer_cycles();
	uint64_t end = t0 + (uint64_t)(seconds * (double)hz);
	*tx = *refused = *rx_n = 0;
	while (rte_get_timer_cycles() < end) {
		unsigned n = 0;
		while (n < BURST) {
			struct rte_mbuf *m = frame(mp, SINK, GEN, len);
			if (m == NULL)
				break;
			b[n++] = m;
		}
		uint16_t s = rte_eth_tx_burst(0, 0, b, (uint16_t)n);
		*tx += s;
		*refused += n - s;
		for (unsigned i = s; i < n; i++)
			rte_pktmbuf_free(b[i]);
		for (int r = 0; r < 2; r++) {
			uint16_t k = rte_eth_rx_burst(1, 0, rx, BURST);
			*rx_n += k;
			for (uint16_t i = 0; i < k; i++)
				rte_pktmbuf_free(rx[i]);
		}
	}
	*took = (double)(rte_get_timer_cycles() - t0) / (double)hz;
	*rx_n += drain(1, 20);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		printf("bench_vhost_peer: EAL init failed\n");
		return 10;
	}
	argc -= ret;
	argv += ret;
	if (argc != 4) {
		printf("bench_vhost_peer: usage: -- SIZE WARMUP_S SECONDS\n");
		return 11;
	}
	uint16_t len = (uint16_t)atoi(argv[1]);
	double warm = atof(argv[2]), secs = atof(argv[3]);
	if (rte_eth_dev_count_avail() != 2) {
		printf("bench_vhost_peer: expected two ports, got %u\n", rte_eth_dev_count_avail());
		return 12;
	}
	struct rte_mempool *mp = rte_pktmbuf_pool_create("mp", 8191, 256, 0,
			RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
	if (mp == NULL) {
		printf("bench_vhost_peer: mempool: %s\n", rte_strerror(rte_errno));
		return 13;
	}
	for (uint16_t p = 0; p < 2; p++) {
		struct rte_eth_conf conf;
		memset(&conf, 0, sizeof(conf));
		if (rte_eth_dev_configure(p, 1, 1, &conf) < 0 ||
		    rte_eth_rx_queue_setup(p, 0, 1024, rte_eth_dev_socket_id(p), NULL, mp) < 0 ||
		    rte_eth_tx_queue_setup(p, 0, 1024, rte_eth_dev_socket_id(p), NULL) < 0 ||
		    rte_eth_dev_start(p) < 0) {
			printf("bench_vhost_peer: port %u setup failed\n", p);
			return 14;
		}
	}
	uint64_t deadline = rte_get_timer_cycles() + 30 * rte_get_timer_hz();
	for (uint16_t p = 0; p < 2; p++) {
		struct rte_eth_link link;
		do {
			memset(&link, 0, sizeof(link));
			rte_eth_link_get_nowait(p, &link);
			if (rte_get_timer_cycles() > deadline) {
				printf("bench_vhost_peer: port %u link never came up\n", p);
				return 16;
			}
			usleep(1000);
		} while (link.link_status != RTE_ETH_LINK_UP);
	}
	/* The switch learns the sink on port 1 (and floods this to port 0). */
	static const uint8_t BCAST[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	for (int i = 0; i < 3; i++) {
		struct rte_mbuf *m = frame(mp, BCAST, SINK, 60);
		if (m != NULL && rte_eth_tx_burst(1, 0, &m, 1) != 1)
			rte_pktmbuf_free(m);
		drain(0, 20);
	}
	uint64_t tx, refused, rx;
	double took;
	if (warm > 0)
		blast(mp, len, warm, &tx, &refused, &rx, &took);
	drain(1, 50);
	blast(mp, len, secs, &tx, &refused, &rx, &took);
	printf("RESULT tx=%lu tx_refused=%lu rx=%lu seconds=%.6f\n", (unsigned long)tx,
	       (unsigned long)refused, (unsigned long)rx, took);
	for (uint16_t p = 0; p < 2; p++)
		rte_eth_dev_stop(p);
	fflush(stdout);
	_exit(0);
}
