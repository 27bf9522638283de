/*
 * memif_peer: a real DPDK peer for routeplex's memif tests (DPDK 22.11, net_memif PMD).
 *
 * Usage: memif_peer <EAL args, e.g. --no-huge -m 256 --no-pci --file-prefix=X
 *                    --vdev=net_memif0,role=client,id=0,socket=/tmp/x.sock,socket-abstract=no>
 *                   -- --mode exchange|flood --count N [--timeout SECONDS]
 *
 * Frames (same layout as crates/ports/tests/memif_common/mod.rs):
 *   dst 02:00:00:00:00:02, src 02:00:00:00:00:01, ethertype 0x88b5,
 *   magic u32 BE, seq u32 BE, length u16 BE, then byte i (from offset 24) = (u8)(seq*31 + i).
 *   Lengths: 60 + (seq * 7919) % 1455, i.e. 60..1514.
 * This peer sends magic "DPK1" (0x44504b31) and checks frames with magic "RPLX" (0x52504c58).
 *
 * exchange: send frames 0..N-1, receive and check frames 0..N-1 in order, then wait for the
 *           DONE frame (seq 0xffffffff) the other side sends once it has everything; exit 0 if
 *           all was sent, received in order and byte-exact. Both directions run concurrently.
 * flood:    send and check forever (until killed); used to kill the peer mid-traffic.
 *
 * Prints "memif_peer: link up" when the memif connection is up and one summary line at the end:
 *   memif_peer: sent=N received=M bad=B out_of_order=O done=D
 */
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#define MAGIC_RPX 0x52504c58u
#define MAGIC_DPDK 0x44504b31u
#define ETHERTYPE 0x88b5
#define HDR 24
#define DONE_SEQ 0xffffffffu
#define BURST 32

static size_t frame_len(uint32_t seq)
{
	return 60 + ((size_t)seq * 7919) % (1514 - 60 + 1);
}

static void write_frame(uint8_t *out, size_t len, uint32_t magic, uint32_t seq)
{
	static const uint8_t macs[12] = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1};
	memcpy(out, macs, 12);
	out[12] = ETHERTYPE >> 8;
	out[13] = ETHERTYPE & 0xff;
	for (int k = 0; k < 4; k++) {
		out[14 + k] = (uint8_t)(magic >> (24 - 8 * k));
		out[18 + k] = (uint8_t)(seq >> (24 - 8 * k));
	}
	out[22] = (uint8_t)(len >> 8);
	out[23] = (uint8_t)len;
	for (size_t i = 0; i < len - HDR; i++)
		out[HDR + i] = (uint8_t)(seq * 31u + (uint32_t)i);
}

/* Returns 0 and sets *seq if `f` is a valid frame with `magic`, -1 otherwise. */
static int check_frame(const uint8_t *f, size_t len, uint32_t magic, uint32_t *seq)
{
	static uint8_t want[2048];
	uint32_t m = 0, s = 0;

	if (len < HDR || len > sizeof(want))
		return -1;
	for (int k = 0; k < 4; k++) {
		m = (m << 8) | f[14 + k];
		s = (s << 8) | f[18 + k];
	}
	if (m != magic || (((size_t)f[22] << 8) | f[23]) != len)
		return -1;
	write_frame(want, len, magic, s);
	if (memcmp(want, f, len) != 0)
		return -1;
	*seq = s;
	return 0;
}

/* Set by SIGUSR1: the test asks a peer that has not finished where it stands. */
static volatile sig_atomic_t dump_state;

static void on_usr1(int sig)
{
	(void)sig;
	dump_state = 1;
}

int main(int argc, char **argv)
{
	signal(SIGUSR1, on_usr1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	int ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		printf("memif_peer: EAL init failed\n");
		return 10;
	}
	argc -= ret;
	argv += ret;

	int flood = 0;
	uint32_t count = 1000;
	unsigned timeout_s = 60;
	static const struct option longopts[] = {
		{"mode", required_argument, NULL, 'm'},
		{"count", required_argument, NULL, 'c'},
		{"timeout", required_argument, NULL, 't'},
		{NULL, 0, NULL, 0},
	};
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 'm':
			flood = strcmp(optarg, "flood") == 0;
			break;
		case 'c':
			count = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 't':
			timeout_s = (unsigned)strtoul(optarg, NULL, 10);
			break;
		default:
			printf("memif_peer: bad arguments\n");
			return 11;
		}
	}

	if (rte_eth_dev_count_avail() != 1) {
		printf("memif_peer: expected exactly one port, got %u\n", rte_eth_dev_count_avail());
		return 12;
	}
	uint16_t port = 0, p;
	RTE_ETH_FOREACH_DEV(p)
		port = p;

	struct rte_mempool *mp = rte_pktmbuf_pool_create("mp", 4095, 128, 0,
			RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
	if (mp == NULL) {
		printf("memif_peer: mempool: %s\n", rte_strerror(rte_errno));
		return 13;
	}
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	if (rte_eth_dev_configure(port, 1, 1, &conf) < 0 ||
	    rte_eth_rx_queue_setup(port, 0, 1024, rte_eth_dev_socket_id(port), NULL, mp) < 0 ||
	    rte_eth_tx_queue_setup(port, 0, 1024, rte_eth_dev_socket_id(port), NULL) < 0) {
		printf("memif_peer: port setup failed\n");
		return 14;
	}
	ret = rte_eth_dev_start(port);
	if (ret < 0) {
		printf("memif_peer: dev_start failed: %d\n", ret);
		return 15;
	}

	const uint64_t hz = rte_get_timer_hz();
	const uint64_t deadline = rte_get_timer_cycles() + (uint64_t)timeout_s * hz;
	struct rte_eth_link link;
	for (;;) {
		memset(&link, 0, sizeof(link));
		rte_eth_link_get_nowait(port, &link);
		if (link.link_status == RTE_ETH_LINK_UP)
			break;
		if (rte_get_timer_cycles() > deadline) {
			printf("memif_peer: link never came up\n");
			return 16;
		}
		usleep(1000);
	}
	printf("memif_peer: link up\n");

	uint32_t next_tx = 0, received = 0, bad = 0, ooo = 0;
	int done = 0, timed_out = 0;
	static uint8_t scratch[2048];
	struct rte_mbuf *tx[BURST], *rx[BURST];
	for (;;) {
		unsigned nb = 0, sent = 0;
		while (nb < BURST && (flood || next_tx + nb < count)) {
			struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
			if (m == NULL)
				break;
			size_t len = frame_len(next_tx + nb);
			uint8_t *d = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)len);
			write_frame(d, len, MAGIC_DPDK, next_tx + nb);
			tx[nb++] = m;
		}
		if (nb > 0) {
			sent = rte_eth_tx_burst(port, 0, tx, (uint16_t)nb);
			for (unsigned i = sent; i < nb; i++)
				rte_pktmbuf_free(tx[i]);
			next_tx += sent;
		}
		uint16_t n = rte_eth_rx_burst(port, 0, rx, BURST);
		for (uint16_t i = 0; i < n; i++) {
			uint32_t len = rte_pktmbuf_pkt_len(rx[i]), seq;
			const uint8_t *f = len <= sizeof(scratch) ?
				rte_pktmbuf_read(rx[i], 0, len, scratch) : NULL;
			if (f == NULL || check_frame(f, len, MAGIC_RPX, &seq) < 0) {
				bad++;
			} else if (seq == DONE_SEQ) {
				done = 1;
			} else {
				if (seq != received)
					ooo++;
				received++;
			}
			rte_pktmbuf_free(rx[i]);
		}
		if (dump_state) {
			struct rte_eth_stats es;
			memset(&es, 0, sizeof(es));
			rte_eth_stats_get(port, &es);
			printf("memif_peer: state sent=%u received=%u bad=%u out_of_order=%u done=%d "
			       "ipackets=%lu opackets=%lu imissed=%lu ierrors=%lu rx_nombuf=%lu "
			       "elapsed_s=%.1f of %u (timer hz %lu)\n",
			       next_tx, received, bad, ooo, done, es.ipackets, es.opackets, es.imissed,
			       es.ierrors, es.rx_nombuf,
			       (double)(rte_get_timer_cycles() + (uint64_t)timeout_s * hz - deadline) /
				       (double)hz,
			       timeout_s, hz);
			dump_state = 0;
		}
		if (!flood && next_tx >= count && received >= count && done)
			break;
		if (rte_get_timer_cycles() > deadline) {
			timed_out = 1;
			break;
		}
		if (sent == 0 && n == 0)
			usleep(20); /* two shared cores: let the other side run */
	}
	printf("memif_peer: sent=%u received=%u bad=%u out_of_order=%u done=%d%s\n", next_tx,
	       received, bad, ooo, done, timed_out ? " TIMEOUT" : "");
	/*
	 * Stop the port (closes the memif connection) and leave without rte_eth_dev_close() and
	 * rte_eal_cleanup(): in 22.11 closing a server whose listener is still registered with the
	 * interrupt thread can crash the process on the way out.
	 */
	rte_eth_dev_stop(port);
	fflush(stdout);
	_exit((!timed_out && bad == 0 && ooo == 0 && received == count && next_tx == count) ? 0 : 1);
}
