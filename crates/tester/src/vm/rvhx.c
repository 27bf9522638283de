/* rvhx DST PORT N: UDP request/response through a router. Sends datagram i (its payload
 * "rvh <i>") and waits up to 300 ms for the same payload to come back; resends up to 10 times.
 * Prints "RVH rvhx sent=N echoed=M tries=T" and exits 0 if every datagram came back.
 * Built static by routeplex's guest image builder; runs in a busybox-only initramfs. */
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: rvhx DST PORT N\n");
		return 2;
	}
	long n = atol(argv[3]);
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
	if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
		fprintf(stderr, "rvhx: bad address %s\n", argv[1]);
		return 2;
	}
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
		perror("rvhx: socket");
		return 1;
	}
	long echoed = 0, tries = 0;
	char out[64], in[128];
	for (long i = 0; i < n; i++) {
		int len = snprintf(out, sizeof(out), "rvh %ld", i);
		int got = 0;
		for (int t = 0; t < 10 && !got; t++) {
			tries++;
			if (send(s, out, (size_t)len, 0) != len)
				continue;
			struct pollfd p = {.fd = s, .events = POLLIN};
			while (!got && poll(&p, 1, 300) == 1) {
				ssize_t r = recv(s, in, sizeof(in), 0);
				if (r == len && memcmp(in, out, (size_t)len) == 0)
					got = 1;
			}
		}
		echoed += got;
	}
	printf("RVH rvhx sent=%ld echoed=%ld tries=%ld\n", n, echoed, tries);
	return echoed == n ? 0 : 1;
}
