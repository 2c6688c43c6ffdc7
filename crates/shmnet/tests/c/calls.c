/* The sockets library's call families, run once under `shmnet run` and once on the
 * kernel's sockets: both runs must print the same lines (crates/shmnet/tests/preload.rs).
 * The peer (preload.rs's PEER script) listens on PEER:6000 (echo), 6001 (reads to the end,
 * answers "N bytes" and closes), 6002 (accepts and resets), 6003 (reads a port, connects
 * back to it and says "back").
 *
 *   calls PEER_IP            every case, one line each ("case: what happened")
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *peer;
static volatile sig_atomic_t sigpipes;

static void die(const char *what) {
    printf("%s: FAILED: %s\n", what, strerror(errno));
    exit(1);
}

static int dial(int port, int flags) {
    int s = socket(AF_INET, SOCK_STREAM | flags, 0);
    if (s < 0) die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, peer, &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) return -errno;
    return s;
}

static int must_dial(int port, const char *what) {
    int s = dial(port, 0);
    if (s < 0) { errno = -s; die(what); }
    return s;
}

/* Reads exactly n bytes (blocking socket). */
static void read_n(int s, char *buf, int n, const char *what) {
    int got = 0;
    while (got < n) {
        ssize_t r = read(s, buf + got, n - got);
        if (r <= 0) die(what);
        got += r;
    }
    buf[n] = 0;
}

static void blocking(void) {
    char buf[16];
    int s = must_dial(6000, "blocking");
    if (write(s, "hello", 5) != 5) die("blocking write");
    read_n(s, buf, 5, "blocking read");
    printf("blocking: %s\n", buf);
    close(s);
}

static void nonblocking(void) {
    char buf[16];
    int s = must_dial(6000, "nonblock");
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    ssize_t r = recv(s, buf, sizeof buf, 0);
    printf("nonblock: empty read %s\n", r < 0 && errno == EAGAIN ? "EAGAIN" : "did not fail");
    if (send(s, "ping", 4, 0) != 4) die("nonblock send");
    struct pollfd p = {.fd = s, .events = POLLIN};
    int n = poll(&p, 1, 5000);
    printf("nonblock: poll %d %s\n", n, p.revents & POLLIN ? "POLLIN" : "-");
    int got = 0;
    while (got < 4) {
        r = recv(s, buf + got, 4 - got, 0);
        if (r > 0) got += r;
        else if (r < 0 && errno == EAGAIN) poll(&p, 1, 5000);
        else die("nonblock recv");
    }
    buf[4] = 0;
    printf("nonblock: %s\n", buf);
    close(s);
}

static void selecting(void) {
    char buf[16];
    int s = must_dial(6000, "select");
    int quiet[2];
    if (pipe(quiet) < 0) die("select pipe");
    if (write(s, "sel", 3) != 3) die("select write");
    fd_set r;
    FD_ZERO(&r);
    FD_SET(s, &r);
    FD_SET(quiet[0], &r); /* a kernel descriptor in the same set, never ready */
    int top = s > quiet[0] ? s : quiet[0];
    struct timeval t = {.tv_sec = 5};
    int n = select(top + 1, &r, NULL, NULL, &t);
    printf("select: %d ready, socket %s, pipe %s\n", n, FD_ISSET(s, &r) ? "readable" : "not readable",
           FD_ISSET(quiet[0], &r) ? "readable" : "quiet");
    if (write(quiet[1], "k", 1) != 1) die("select pipe write");
    struct pollfd p[2] = {{.fd = quiet[0], .events = POLLIN}, {.fd = s, .events = POLLOUT}};
    n = poll(p, 2, 5000);
    printf("select: then poll %d: pipe %s, socket %s\n", n, p[0].revents & POLLIN ? "readable" : "-",
           p[1].revents & POLLOUT ? "writable" : "-");
    close(quiet[0]);
    close(quiet[1]);
    read_n(s, buf, 3, "select read");
    printf("select: %s\n", buf);
    close(s);
}

static void epoll_level(void) {
    char buf[16];
    int s = must_dial(6000, "epoll-lt");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 42}, out[4];
    if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) < 0) die("epoll-lt ctl");
    printf("epoll-lt: idle wait %d\n", epoll_wait(ep, out, 4, 100));
    if (write(s, "lt", 2) != 2) die("epoll-lt write");
    int n = epoll_wait(ep, out, 4, 5000);
    printf("epoll-lt: %d event, data %llu, %s\n", n, (unsigned long long)out[0].data.u64,
           out[0].events & EPOLLIN ? "EPOLLIN" : "-");
    n = epoll_wait(ep, out, 4, 100);
    printf("epoll-lt: unread, wait again %d\n", n);
    read_n(s, buf, 2, "epoll-lt read");
    printf("epoll-lt: %s, then %d\n", buf, epoll_wait(ep, out, 4, 100));
    close(ep);
    close(s);
}

static void epoll_edge(void) {
    char buf[16];
    int s = must_dial(6000, "epoll-et");
    fcntl(s, F_SETFL, O_NONBLOCK);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLET}, out[4];
    if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) < 0) die("epoll-et ctl");
    int n = epoll_wait(ep, out, 4, 5000);
    printf("epoll-et: %d %s\n", n, n == 1 && out[0].events & EPOLLOUT ? "EPOLLOUT" : "-");
    printf("epoll-et: no repeat %d\n", epoll_wait(ep, out, 4, 100));
    ev.events = EPOLLIN | EPOLLET;
    if (epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev) < 0) die("epoll-et mod");
    printf("epoll-et: nothing to read %d\n", epoll_wait(ep, out, 4, 100));
    if (write(s, "et", 2) != 2) die("epoll-et write");
    n = epoll_wait(ep, out, 4, 5000);
    printf("epoll-et: %d %s\n", n, n == 1 && out[0].events & EPOLLIN ? "EPOLLIN" : "-");
    int got = 0;
    for (;;) {
        ssize_t r = read(s, buf + got, sizeof buf - 1 - got);
        if (r > 0) { got += r; continue; }
        if (r < 0 && errno == EAGAIN) {
            if (got < 2) { epoll_wait(ep, out, 4, 5000); continue; }
            break;
        }
        die("epoll-et read");
    }
    buf[got] = 0;
    printf("epoll-et: %s, drained, then %d\n", buf, epoll_wait(ep, out, 4, 100));
    close(ep);
    close(s);
}

static void half_close(void) {
    char buf[64], data[3000];
    memset(data, 'x', sizeof data);
    int s = must_dial(6001, "half-close");
    if (write(s, data, sizeof data) != sizeof data) die("half-close write");
    if (shutdown(s, SHUT_WR) < 0) die("half-close shutdown");
    int got = 0;
    ssize_t r;
    while ((r = read(s, buf + got, sizeof buf - 1 - got)) > 0) got += r;
    if (r < 0) die("half-close read");
    buf[got] = 0;
    printf("half-close: peer says \"%s\", then end of stream\n", buf);
    close(s);
}

static void on_sigpipe(int sig) { (void)sig; sigpipes++; }

static void broken_pipe(void) {
    char data[1024] = {0};
    signal(SIGPIPE, on_sigpipe);
    int s = must_dial(6002, "sigpipe");
    usleep(300 * 1000); /* the reset arrives */
    int err = 0;
    for (int i = 0; i < 100 && err != EPIPE; i++) {
        if (write(s, data, sizeof data) < 0) {
            if (errno != EPIPE && errno != ECONNRESET) die("sigpipe write");
            err = errno;
        } else {
            usleep(10 * 1000);
        }
    }
    printf("sigpipe: writes end in %s, SIGPIPE %s\n", err == EPIPE ? "EPIPE" : "?",
           sigpipes > 0 ? "raised" : "not raised");
    int before = sigpipes;
    ssize_t r = send(s, data, 1, MSG_NOSIGNAL);
    printf("sigpipe: MSG_NOSIGNAL %s, %s\n", r < 0 && errno == EPIPE ? "EPIPE" : "?",
           sigpipes == before ? "no signal" : "a signal");
    close(s);
    signal(SIGPIPE, SIG_DFL);
}

static void duplicate(void) {
    char buf[16];
    int s = must_dial(6000, "dup");
    int d = dup(s);
    close(s);
    if (write(d, "dup", 3) != 3) die("dup write");
    read_n(d, buf, 3, "dup read");
    int d2 = fcntl(d, F_DUPFD_CLOEXEC, 100);
    printf("dup: %s; F_DUPFD %s\n", buf, d2 >= 100 ? "ok" : "failed");
    close(d2);
    if (write(d, "on", 2) != 2) die("dup write after closing a duplicate");
    read_n(d, buf, 2, "dup read after closing a duplicate");
    printf("dup: %s after closing a duplicate\n", buf);
    close(d);
}

static void forking(void) {
    char buf[16];
    int s = must_dial(6000, "fork");
    pid_t pid = fork();
    if (pid == 0) {
        close(s);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    if (write(s, "fork", 4) != 4) die("fork write");
    read_n(s, buf, 4, "fork read");
    printf("fork: the parent still talks after the child closed its copy: %s\n", buf);
    close(s);
}

static void names(void) {
    int s = must_dial(6000, "names");
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    char ip[32];
    if (getpeername(s, (struct sockaddr *)&a, &len) < 0) die("getpeername");
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    printf("names: peer %s:%d, length %d\n", ip, ntohs(a.sin_port), (int)len);
    len = sizeof a;
    if (getsockname(s, (struct sockaddr *)&a, &len) < 0) die("getsockname");
    printf("names: local port %s\n", ntohs(a.sin_port) != 0 ? "set" : "zero");
    int one = 1, v = 0;
    socklen_t vl = sizeof v;
    if (setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) die("TCP_NODELAY");
    if (getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &vl) < 0) die("get TCP_NODELAY");
    printf("names: TCP_NODELAY %s\n", v ? "on" : "off");
    vl = sizeof v;
    if (getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &vl) < 0) die("SO_TYPE");
    printf("names: SO_TYPE %s\n", v == SOCK_STREAM ? "SOCK_STREAM" : "?");
    close(s);
}

static void nonblocking_connect(void) {
    int s = dial(6000, SOCK_NONBLOCK);
    if (s < 0) { errno = -s; die("connect-nb"); }
    struct pollfd p = {.fd = s, .events = POLLOUT};
    poll(&p, 1, 5000);
    int err = -1;
    socklen_t len = sizeof err;
    getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    printf("connect-nb: %s\n", p.revents & POLLOUT && err == 0 ? "connected" : "failed");
    close(s);
    s = dial(6009, 0);
    printf("refused: %s\n", s == -ECONNREFUSED ? "ECONNREFUSED" : "?");
    if (s >= 0) close(s);
}

static void accepting(void) {
    char buf[16];
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0) die("accept bind");
    if (listen(l, 4) < 0) die("accept listen");
    socklen_t len = sizeof a;
    getsockname(l, (struct sockaddr *)&a, &len);
    int s = must_dial(6003, "accept dial");
    int n = snprintf(buf, sizeof buf, "%d\n", ntohs(a.sin_port));
    if (write(s, buf, n) != n) die("accept write");
    struct sockaddr_in from;
    len = sizeof from;
    int c = accept4(l, (struct sockaddr *)&from, &len, SOCK_CLOEXEC);
    if (c < 0) die("accept");
    read_n(c, buf, 5, "accept read");
    printf("accept: the peer connected back and said %s", buf);
    printf("accept: from a %s address\n", from.sin_family == AF_INET ? "IPv4" : "?");
    close(c);
    close(s);
    close(l);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: calls PEER_IP\n");
        return 2;
    }
    peer = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    blocking();
    nonblocking();
    selecting();
    epoll_level();
    epoll_edge();
    half_close();
    broken_pipe();
    duplicate();
    forking();
    names();
    nonblocking_connect();
    accepting();
    return 0;
}
