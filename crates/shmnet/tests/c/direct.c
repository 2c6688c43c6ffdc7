/* A program linked with shmnet's sockets library directly (no LD_PRELOAD), using its own
 * calls from shmnet.h (crates/shmnet/tests/preload.rs runs it against a loopback server at
 * 10.99.0.1, named by SHMNET_SERVER). Also: select refuses a server socket past
 * FD_SETSIZE cleanly (EINVAL) where poll takes it.
 *
 *   direct            one line per check
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shmnet.h"

static struct sockaddr_in at(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "10.99.0.1", &a.sin_addr);
    return a;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("present: %d\n", shmnet_present());
    int p[2];
    if (pipe(p) < 0) return 1;
    printf("a pipe carried: %d\n", shmnet_fd_carried(p[0]));
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = at(9);
    sendto(u, "x", 1, 0, (struct sockaddr *)&to, sizeof to);
    printf("a UDP socket sent off loopback carried: %d\n", shmnet_fd_carried(u));
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in any = {.sin_family = AF_INET};
    socklen_t len = sizeof any;
    if (bind(l, (struct sockaddr *)&any, sizeof any) < 0 || listen(l, 4) < 0) return 1;
    getsockname(l, (struct sockaddr *)&any, &len);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in srv = at(ntohs(any.sin_port));
    if (connect(c, (struct sockaddr *)&srv, sizeof srv) < 0) return 1;
    int a = accept(l, NULL, NULL);
    printf("a listener, a connection and the one it accepted carried: %d %d %d\n",
           shmnet_fd_carried(l), shmnet_fd_carried(c), shmnet_fd_carried(a));
    char buf[8] = {0};
    if (write(c, "direct", 6) != 6) return 1;
    int got = 0;
    while (got < 6) {
        ssize_t r = read(a, buf + got, 6 - got);
        if (r <= 0) return 1;
        got += r;
    }
    printf("read: %s\n", buf);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_max < 1501) {
        printf("select past FD_SETSIZE: not tried (fd limit %ld)\n", (long)rl.rlim_max);
        return 0;
    }
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    int hi = dup2(a, 1500);
    unsigned long sets[2048 / (8 * sizeof(unsigned long))];
    memset(sets, 0, sizeof sets);
    sets[1500 / (8 * sizeof(unsigned long))] |= 1UL << (1500 % (8 * sizeof(unsigned long)));
    struct timeval zero = {0, 0};
    int r = select(1501, NULL, (fd_set *)sets, NULL, &zero);
    printf("select past FD_SETSIZE: %s\n", r < 0 && errno == EINVAL ? "EINVAL" : "?");
    struct pollfd pf = {.fd = hi, .events = POLLOUT};
    printf("poll takes it: %d\n", poll(&pf, 1, 1000));
    return 0;
}
