/* The sockets library's call families, run once under `shmnet run` and once on the
 * kernel's sockets: both runs must print the same lines (crates/shmnet/tests/preload.rs).
 * The peer (preload.rs's PEER script) listens on PEER:6000 (echo), 6001 (reads to the end,
 * answers "N bytes" and closes), 6002 (accepts and resets), 6003 (reads a port, connects
 * back to it and says "back"), UDP 6004 (echoes each datagram; one that starts "other" is
 * answered from port 6005 instead), 6006 (reads a port, connects back to it, reads until
 * its reads end or are reset, and says which: "ended" or "were reset"), 6007 (ends its side
 * with a FIN, reads one byte, then resets), 6008 (says how many bytes its first read took,
 * and closes).
 *
 * preload.rs compiles it with _FORTIFY_SOURCE, so read, recv, recvfrom and poll are glibc's
 * checked entry points (__read_chk…), as in most of Debian's programs.
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
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *peer;
static volatile sig_atomic_t sigpipes;

static void die(const char *what) {
    printf("%s: FAILED: %s\n", what, strerror(errno));
    exit(1);
}

static struct sockaddr_in peer_at(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, peer, &a.sin_addr);
    return a;
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
    struct pollfd p = {.fd = s, .events = POLLIN};
    poll(&p, 1, 5000);
    printf("sigpipe: the reset polls %s\n",
           (p.revents & (POLLERR | POLLHUP)) == (POLLERR | POLLHUP) ? "POLLERR|POLLHUP" : "no error bits");
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

/* Reads of a connection the peer ended with a FIN and then a reset: the first read ends
 * (Linux returns the end of the stream; shmnet may say ECONNRESET first), and later reads
 * return the end, never wait. */
static void reset_reads(void) {
    char buf[8];
    int s = must_dial(6002, "reset-read");
    usleep(300 * 1000); /* the reset arrives */
    ssize_t r = read(s, buf, sizeof buf);
    printf("reset-read: %s", r == 0 || (r < 0 && errno == ECONNRESET) ? "ended" : "?");
    r = read(s, buf, sizeof buf);
    printf(", then %d\n", (int)r);
    close(s);
}

/* What a connection whose peer ended and reset shows next: poll, a read, writes; then it is
 * closed and SIGPIPE restored. */
static void after_the_reset(int s) {
    char buf[8];
    struct pollfd p = {.fd = s, .events = POLLIN};
    int n = poll(&p, 1, 5000);
    printf(", then poll %d%s%s%s", n, p.revents & POLLIN ? " POLLIN" : "",
           p.revents & POLLERR ? " POLLERR" : "", p.revents & POLLHUP ? " POLLHUP" : "");
    ssize_t r = read(s, buf, sizeof buf);
    printf(", read %d", (int)r);
    int err = 0;
    for (int i = 0; i < 3 && err != EPIPE; i++)
        if (write(s, "y", 1) < 0) err = errno;
    printf(", writes end in %s\n", err == EPIPE ? "EPIPE" : err ? strerrorname_np(err) : "nothing");
    close(s);
    signal(SIGPIPE, SIG_DFL);
}

/* A peer that ends its side, and resets only later (its FIN and its reset arrive apart, in
 * CLOSE-WAIT): reads stay at the end of the stream, but poll reports the error and writes
 * fail with EPIPE, as Linux's. (Under shmnet the reset was once withheld after the end had
 * been read, and writes went on into a connection that no longer existed.) */
static void ended_then_reset(void) {
    char buf[8];
    signal(SIGPIPE, SIG_IGN);
    int s = must_dial(6007, "end-then-reset");
    ssize_t r = read(s, buf, sizeof buf);
    printf("end-then-reset: first read %d", (int)r);
    if (write(s, "x", 1) != 1) die("end-then-reset write");
    usleep(300 * 1000); /* the reset arrives */
    after_the_reset(s);
}

/* The same when the FIN and the reset arrive together (the peer ends and resets at once):
 * Linux's first read still shows the end of the stream, not the reset. */
static void ended_and_reset(void) {
    char buf[8];
    signal(SIGPIPE, SIG_IGN);
    int s = must_dial(6010, "end-and-reset");
    usleep(300 * 1000); /* the FIN and the reset arrive */
    ssize_t r = read(s, buf, sizeof buf);
    printf("end-and-reset: first read %d", (int)r);
    if (r < 0) printf(" %s", strerrorname_np(errno));
    after_the_reset(s);
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

/* The exit status of child `pid`, as one word. */
static const char *child_said(pid_t pid) {
    int st;
    if (waitpid(pid, &st, 0) != pid) die("waitpid");
    if (!WIFEXITED(st)) return "killed";
    switch (WEXITSTATUS(st)) {
    case 0: return "ok";
    case 2: return "wrong bytes";
    case 3: return "a call failed";
    default: return "an odd exit";
    }
}

/* Sends "N\n" (our listener's port) to the peer's 6003, which connects back and says "back". */
static int ask_back(int l, const char *what) {
    char buf[16];
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    getsockname(l, (struct sockaddr *)&a, &len);
    int s = must_dial(6003, what);
    int n = snprintf(buf, sizeof buf, "%d\n", ntohs(a.sin_port));
    if (write(s, buf, n) != n) die(what);
    return s;
}

/* A listener on our own address, any port. */
static int own_listener(const char *what) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    int probe = must_dial(6000, what);
    socklen_t len = sizeof a;
    getsockname(probe, (struct sockaddr *)&a, &len);
    close(probe);
    a.sin_port = 0;
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0) die(what);
    if (listen(l, 4) < 0) die(what);
    return l;
}

/* Reads exactly n bytes in a child: exit 3 if a read fails, 2 if they are not `want`. */
static void child_expects(int s, const char *want) {
    char buf[32];
    int n = strlen(want), got = 0;
    while (got < n) {
        ssize_t r = read(s, buf + got, n - got);
        if (r <= 0) _exit(3);
        got += r;
    }
    _exit(memcmp(buf, want, n) ? 2 : 0);
}

/* The servers that fork: per connection (the parent accepts, forks, closes its copy and
 * accepts again; the child serves), and pre-forked (a worker accepts on the listener its
 * parent made). And a child that talks on a connection its parent closed. */
static void forking_servers(void) {
    char buf[16];
    int l = own_listener("fork server");
    int s = ask_back(l, "fork server dial");
    int c = accept(l, NULL, NULL);
    if (c < 0) die("fork server accept");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(l);
        child_expects(c, "back\n");
    }
    close(c);
    printf("fork: a child served the connection its parent accepted: %s\n", child_said(pid));
    close(s);
    s = ask_back(l, "fork server dial again");
    c = accept(l, NULL, NULL);
    if (c < 0) die("fork server accept again");
    read_n(c, buf, 5, "fork server read again");
    printf("fork: the parent accepts again after its child closed the listener: %s", buf);
    close(c);
    close(s);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        int w = accept(l, NULL, NULL);
        if (w < 0) _exit(3);
        child_expects(w, "back\n");
    }
    s = ask_back(l, "prefork dial");
    printf("fork: a pre-forked worker accepted on its parent's listener: %s\n", child_said(pid));
    close(s);
    close(l);
    s = must_dial(6000, "fork talk");
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        if (write(s, "kid", 3) != 3) _exit(3);
        child_expects(s, "kid");
    }
    close(s);
    printf("fork: a child talks on a connection its parent closed: %s\n", child_said(pid));
}

/* exec: a program started by exec keeps a socket not marked close-on-exec — with the bytes
 * delivered to it before the exec — and not one marked close-on-exec; the program before
 * keeps its copy; an exec that fails leaves the socket working. */
static void execing(void) {
    char buf[16], cmd[256];
    int s = must_dial(6000, "exec");
    if (write(s, "exec1", 5) != 5) die("exec write");
    struct pollfd p = {.fd = s, .events = POLLIN};
    poll(&p, 1, 5000); /* the echo is there, unread, at the exec */
    /* At a number the program started will not reuse for a descriptor of its own (the
     * library's, under shmnet run, take the lowest free ones): its absence is the test. */
    int first = must_dial(6000, "exec cloexec");
    int gone = dup2(first, 60);
    if (gone != 60) die("exec dup2");
    close(first);
    if (fcntl(gone, F_SETFD, FD_CLOEXEC) < 0) die("exec F_SETFD");
    snprintf(cmd, sizeof cmd,
             "head -c 5 <&3; printf exec2 >&3; head -c 5 <&3; "
             "if [ -e /proc/self/fd/%d ]; then echo ' and the other kept'; "
             "else echo ' and the other closed'; fi",
             gone);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (dup2(s, 3) < 0) _exit(4);
        if (s != 3) close(s);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(5);
    }
    printf("exec: the program started: %s\n", child_said(pid));
    if (write(s, "exec3", 5) != 5) die("exec write after");
    read_n(s, buf, 5, "exec read after");
    printf("exec: the program before still talks: %.5s\n", buf);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        char *argv[] = {"no-such-program", NULL};
        execvp("/nonexistent/no-such-program", argv);
        if (errno != ENOENT) _exit(6);
        if (write(s, "exec4", 5) != 5) _exit(3);
        child_expects(s, "exec4");
    }
    printf("exec: after an exec that failed the socket works: %s\n", child_said(pid));
    close(gone);
    /* A vfork child (dash's, posix_spawn's, Python's subprocess) shares this memory: its
     * dup2 of the socket onto its standard output must not become this process's. */
    fflush(stdout);
    pid = vfork();
    if (pid == 0) {
        dup2(s, 1);
        execl("/bin/true", "true", (char *)NULL);
        _exit(5);
    }
    int st;
    waitpid(pid, &st, 0);
    const char line[] = "exec: after a vfork child's dup2, write(1) is still standard output\n";
    if (write(1, line, sizeof line - 1) != (ssize_t)(sizeof line - 1)) die("vfork write");
    close(s);
}

static int blocked_listener;
static char blocked_got[16];

static void *accept_back(void *arg) {
    (void)arg;
    int c = accept(blocked_listener, NULL, NULL);
    if (c < 0) {
        snprintf(blocked_got, sizeof blocked_got, "failed\n");
        return NULL;
    }
    read_n(c, blocked_got, 5, "fork thread read");
    close(c);
    return NULL;
}

/* A thread blocked in accept while another thread forks a child that lives on (it waits
 * on a pipe): the connection that comes next is still accepted by the thread (within the
 * listener's 5 s SO_RCVTIMEO). */
static void forking_threads(void) {
    pthread_t t;
    int p[2];
    char c;
    if (pipe(p)) die("fork thread pipe");
    blocked_listener = own_listener("fork thread listener");
    struct timeval tv = {.tv_sec = 5};
    setsockopt(blocked_listener, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (pthread_create(&t, NULL, accept_back, NULL)) die("fork thread");
    usleep(100 * 1000);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[1]);
        _exit(read(p[0], &c, 1) == 1 ? 0 : 3);
    }
    close(p[0]);
    int s = ask_back(blocked_listener, "fork thread dial");
    pthread_join(t, NULL);
    if (write(p[1], "x", 1) != 1) die("fork thread pipe write");
    close(p[1]);
    printf("fork: a thread blocked in accept across a fork accepted: %s", blocked_got);
    printf("fork: the child meanwhile: %s\n", child_said(pid));
    close(s);
    close(blocked_listener);
}

static void forking(void) {
    char buf[16];
    int s = must_dial(6000, "fork");
    fflush(stdout);
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

/* What a kernel socket refuses or has none of: lseek and pread (ESPIPE: bash's `read`
 * builtin reads ahead and seeks back on a descriptor that seeks), IP_OPTIONS (empty: sshd
 * drops a connection whose options are not). */
static void unseekable(void) {
    char buf[8];
    int s = must_dial(6000, "unseekable");
    errno = 0;
    off_t at = lseek(s, 0, SEEK_CUR);
    printf("unseekable: lseek %ld %s\n", (long)at, strerrorname_np(errno));
    errno = 0;
    ssize_t r = pread(s, buf, sizeof buf, 0);
    printf("unseekable: pread %zd %s\n", r, strerrorname_np(errno));
    unsigned char opts[40];
    socklen_t ol = sizeof opts;
    int g = getsockopt(s, IPPROTO_IP, IP_OPTIONS, opts, &ol);
    printf("unseekable: IP_OPTIONS %d, %u bytes\n", g, (unsigned)ol);
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
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = peer_at(6000);
    int r = connect(s, (struct sockaddr *)&a, sizeof a);
    printf("connect-nb: %s\n", r < 0 && errno == EINPROGRESS ? "EINPROGRESS" : "returned at once");
    struct pollfd p = {.fd = s, .events = POLLOUT};
    poll(&p, 1, 5000);
    int err = -1;
    socklen_t len = sizeof err;
    getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    printf("connect-nb: %s\n", p.revents & POLLOUT && err == 0 ? "connected" : "failed");
    for (int i = 0; i < 2; i++) {
        r = connect(s, (struct sockaddr *)&a, sizeof a);
        printf("connect-nb: again %s\n", r == 0 ? "0" : errno == EISCONN ? "EISCONN" : strerror(errno));
    }
    if (write(s, "nb", 2) != 2) die("connect-nb write");
    p.events = POLLIN;
    poll(&p, 1, 5000);
    char buf[4] = {0};
    printf("connect-nb: echoed %d\n", (int)read(s, buf, 2));
    close(s);
    s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    a = peer_at(6009);
    r = connect(s, (struct sockaddr *)&a, sizeof a);
    int connect_errno = errno; /* a successful call may change errno: read it now */
    p = (struct pollfd){.fd = s, .events = POLLOUT};
    poll(&p, 1, 5000);
    len = sizeof err;
    getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    printf("refused-nb: %s, SO_ERROR %s, %s\n", r < 0 && connect_errno == EINPROGRESS ? "EINPROGRESS" : "?",
           err == ECONNREFUSED ? "ECONNREFUSED" : strerror(err),
           (p.revents & (POLLERR | POLLHUP)) == (POLLERR | POLLHUP) ? "POLLERR|POLLHUP" : "no error bits");
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
    /* Set on the listener only: accepted connections inherit it (memcached relies on it). */
    setsockopt(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
    int nodelay = -1;
    socklen_t nl = sizeof nodelay;
    getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &nodelay, &nl);
    printf("accept: TCP_NODELAY inherited from the listener: %d\n", nodelay);
    close(c);
    close(s);
    close(l);
}

/* writev and sendmsg of several small buffers go out as one write would, in one segment:
 * the peer's first read takes all of them. (Once each buffer was a write of its own, and
 * the second waited behind Nagle for the peer's delayed ACK: 44 ms per memcached reply.) */
static void gathering(void) {
    char head[] = "VALUE k 0 10\r\n", body[] = "vvvvvvvvvv\r\nEND\r\n", buf[32];
    for (int use_sendmsg = 0; use_sendmsg <= 1; use_sendmsg++) {
        int s = must_dial(6008, "gather dial");
        struct iovec v[2] = {{head, strlen(head)}, {body, strlen(body)}};
        struct msghdr m = {.msg_iov = v, .msg_iovlen = 2};
        ssize_t w = use_sendmsg ? sendmsg(s, &m, 0) : writev(s, v, 2);
        int got = 0;
        ssize_t r;
        while (got < (int)sizeof buf - 1 && (r = read(s, buf + got, sizeof buf - 1 - got)) > 0) got += r;
        buf[got] = 0;
        printf("gather: %s of %d bytes, the peer's first read took %s", use_sendmsg ? "sendmsg" : "writev",
               (int)w, buf);
        close(s);
    }
}

/* A listener of the server's on an ephemeral port; its port in *port. */
static int listener(int *port, const char *what) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0) die(what);
    if (listen(l, 4) < 0) die(what);
    socklen_t len = sizeof a;
    getsockname(l, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return l;
}

/* SO_LINGER: a linger of zero makes close reset the connection. The peer connects back to
 * a listener of ours and says whether its reads ended or were reset when we closed. */
static void lingering(void) {
    char buf[32];
    for (int zero = 0; zero <= 1; zero++) {
        int port, l = listener(&port, "linger listen");
        int s = must_dial(6006, "linger dial");
        int n = snprintf(buf, sizeof buf, "%d\n", port);
        if (write(s, buf, n) != n) die("linger write");
        int c = accept(l, NULL, NULL);
        if (c < 0) die("linger accept");
        if (zero) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0}, got = {0};
            socklen_t gl = sizeof got;
            if (setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0) die("SO_LINGER");
            getsockopt(c, SOL_SOCKET, SO_LINGER, &got, &gl);
            printf("linger: SO_LINGER reads back {%d, %d}, %d bytes\n", got.l_onoff, got.l_linger,
                   (int)gl);
        }
        close(c);
        int got = 0;
        ssize_t r;
        while (got < (int)sizeof buf - 1 && (r = read(s, buf + got, sizeof buf - 1 - got)) > 0) got += r;
        buf[got] = 0;
        printf("linger: after a %s close the peer's reads %s", zero ? "zero-linger" : "plain", buf);
        close(s);
        close(l);
    }
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* SO_LINGER with a time: close waits until the peer has acknowledged everything, at most
 * that time, and returns 0 either way; the bytes arrive either way. The peer connects back,
 * waits DELAY seconds before it reads, reads to the end and says how many bytes it got. We
 * fill what the connection holds (writes that do not block, until EAGAIN), so that with a
 * peer that waits the bytes cannot all be acknowledged before the linger ends. */
static void lingering_with_a_time(void) {
    char buf[64];
    static char data[65536];
    const int cases[2][2] = {{0, 10}, {5, 1}}; /* {peer's delay, linger} in seconds */
    for (int k = 0; k < 2; k++) {
        int delay = cases[k][0], time = cases[k][1];
        int port, l = listener(&port, "linger-time listen");
        int s = must_dial(6009, "linger-time dial");
        int n = snprintf(buf, sizeof buf, "%d %d\n", port, delay);
        if (write(s, buf, n) != n) die("linger-time write");
        int c = accept(l, NULL, NULL);
        if (c < 0) die("linger-time accept");
        struct linger lg = {.l_onoff = 1, .l_linger = time};
        if (setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0) die("SO_LINGER time");
        long sent = 0;
        int fl = fcntl(c, F_GETFL);
        fcntl(c, F_SETFL, fl | O_NONBLOCK);
        for (;;) {
            ssize_t w = write(c, data, sizeof data);
            if (w > 0) {
                sent += w;
                if (delay == 0 && sent >= 1 << 20) break;
                continue;
            }
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            die("linger-time fill");
        }
        fcntl(c, F_SETFL, fl);
        double t0 = seconds_now();
        int rc = close(c);
        double took = seconds_now() - t0;
        int got = 0;
        ssize_t r;
        while (got < (int)sizeof buf - 1 && (r = read(s, buf + got, sizeof buf - 1 - got)) > 0) got += r;
        buf[got] = 0;
        long peer = atol(buf);
        if (delay == 0)
            printf("linger: a %d s linger, a peer that reads at once: close returned %d before its time: %s; the peer read all that was sent: %s\n",
                   time, rc, took < time ? "yes" : "no", peer == sent ? "yes" : "no");
        else
            printf("linger: a %d s linger, a peer that waits %d s: close returned %d after waiting its time: %s, not the peer's: %s; the peer read all that was sent: %s\n",
                   time, delay, rc, took >= time - 0.05 ? "yes" : "no", took < delay ? "yes" : "no",
                   peer == sent ? "yes" : "no");
        close(s);
        close(l);
    }
}

static int blocked_accept_errno;

static void *accept_blocked(void *arg) {
    int c = accept(*(int *)arg, NULL, NULL);
    blocked_accept_errno = c < 0 ? errno : 0;
    return NULL;
}

/* shutdown of a listener: SHUT_WR changes nothing; SHUT_RDWR stops it, waking a thread
 * blocked in its accept with EINVAL; listen takes it again. */
static void stop_listening(void) {
    int port, l = listener(&port, "stop listen");
    pthread_t t;
    pthread_create(&t, NULL, accept_blocked, &l);
    usleep(200 * 1000); /* the thread is asleep in accept */
    int wr = shutdown(l, SHUT_WR);
    int rdwr = shutdown(l, SHUT_RDWR);
    pthread_join(t, NULL);
    printf("stop-listening: SHUT_WR %d, SHUT_RDWR %d, the blocked accept fails with %s\n", wr, rdwr,
           strerrorname_np(blocked_accept_errno));
    int c = accept(l, NULL, NULL);
    const char *again = c < 0 ? strerrorname_np(errno) : "accepted?";
    int relisten = listen(l, 4);
    printf("stop-listening: accept again %s, listen again %d\n", again, relisten);
    close(l);
}

/* Waits up to 5 s for a datagram on s; 1 if one came. */
static int datagram_waits(int s) {
    struct pollfd p = {.fd = s, .events = POLLIN};
    return poll(&p, 1, 5000) == 1 && (p.revents & POLLIN);
}

/* IP_PKTINFO: a UDP socket bound to the wildcard learns each datagram's destination in a
 * control message (dnsmasq and unbound answer from it); it is our address, the one a socket
 * connected to the peer has; too small a control buffer gets MSG_CTRUNC. */
static void packet_info(void) {
    int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, on = 0;
    struct sockaddr_in any = {.sin_family = AF_INET}, to = peer_at(6004), us;
    if (bind(s, (struct sockaddr *)&any, sizeof any) < 0) die("pktinfo bind");
    setsockopt(s, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
    socklen_t ol = sizeof on;
    getsockopt(s, IPPROTO_IP, IP_PKTINFO, &on, &ol);
    int c = socket(AF_INET, SOCK_DGRAM, 0);
    connect(c, (struct sockaddr *)&to, sizeof to);
    socklen_t ul = sizeof us;
    getsockname(c, (struct sockaddr *)&us, &ul);
    close(c);
    for (int small = 0; small <= 1; small++) {
        if (sendto(s, "pkt", 3, 0, (struct sockaddr *)&to, sizeof to) != 3) die("pktinfo sendto");
        if (!datagram_waits(s)) die("pktinfo reply");
        char buf[16], control[small ? 4 : 64];
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                           .msg_controllen = sizeof control};
        ssize_t r = recvmsg(s, &m, 0);
        struct cmsghdr *h = small ? NULL : CMSG_FIRSTHDR(&m);
        const char *said = "no control message";
        if (h && h->cmsg_level == IPPROTO_IP && h->cmsg_type == IP_PKTINFO) {
            struct in_pktinfo pi;
            memcpy(&pi, CMSG_DATA(h), sizeof pi);
            said = pi.ipi_addr.s_addr == us.sin_addr.s_addr ? "IP_PKTINFO to our address"
                                                             : "IP_PKTINFO to another address";
        }
        printf("pktinfo: option %d, %d bytes with %s%s\n", on, (int)r, said,
               m.msg_flags & MSG_CTRUNC ? ", MSG_CTRUNC" : "");
    }
    close(s);
}

static void datagrams(void) {
    char buf[64];
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0) die("udp socket");
    struct sockaddr_in to = peer_at(6004), from;
    if (sendto(s, "hello", 5, 0, (struct sockaddr *)&to, sizeof to) != 5) die("udp sendto");
    printf("udp: a reply %s\n", datagram_waits(s) ? "came" : "did not come");
    int n = -1;
    ioctl(s, FIONREAD, &n);
    printf("udp: FIONREAD %d\n", n);
    ssize_t r = recv(s, buf, 2, MSG_PEEK);
    printf("udp: peeked %d bytes, %.2s\n", (int)r, buf);
    struct iovec iov = {.iov_base = buf, .iov_len = 3};
    struct msghdr m = {.msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov, .msg_iovlen = 1};
    r = recvmsg(s, &m, 0);
    char ip[32];
    inet_ntop(AF_INET, &from.sin_addr, ip, sizeof ip);
    printf("udp: recvmsg %d bytes %.3s%s from %s:%d (length %d)\n", (int)r, buf,
           m.msg_flags & MSG_TRUNC ? ", truncated" : "", ip, ntohs(from.sin_port), (int)m.msg_namelen);
    r = recv(s, buf, sizeof buf, MSG_DONTWAIT);
    printf("udp: then %s\n", r < 0 && errno == EAGAIN ? "EAGAIN" : "more");
    socklen_t len = sizeof from;
    getsockname(s, (struct sockaddr *)&from, &len);
    printf("udp: bound to a port %s\n", ntohs(from.sin_port) ? "the sendto picked" : "zero");
    int v = 0;
    socklen_t vl = sizeof v;
    getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &vl);
    printf("udp: SO_TYPE %s\n", v == SOCK_DGRAM ? "SOCK_DGRAM" : "?");
    close(s);

    /* Connected: send and recv without addresses, and the peer's name. */
    s = socket(AF_INET, SOCK_DGRAM, 0);
    if (connect(s, (struct sockaddr *)&to, sizeof to) < 0) die("udp connect");
    if (send(s, "abc", 3, 0) != 3) die("udp send");
    r = datagram_waits(s) ? read(s, buf, sizeof buf) : -1;
    printf("udp connected: read %d bytes %.3s\n", (int)r, buf);
    len = sizeof from;
    if (getpeername(s, (struct sockaddr *)&from, &len) < 0) die("udp getpeername");
    printf("udp connected: peer port %d\n", ntohs(from.sin_port));
    r = sendto(s, "x", 1, 0, NULL, 0);
    printf("udp connected: sendto without an address %s\n", r == 1 ? "sent" : "failed");
    if (datagram_waits(s)) recv(s, buf, sizeof buf, 0);

    /* Several at once. */
    struct mmsghdr mm[3];
    struct iovec v3[3];
    char out[3][4] = {"m1", "m2", "m3"}, in[3][16];
    memset(mm, 0, sizeof mm);
    for (int i = 0; i < 3; i++) {
        v3[i] = (struct iovec){.iov_base = out[i], .iov_len = 2};
        mm[i].msg_hdr.msg_iov = &v3[i];
        mm[i].msg_hdr.msg_iovlen = 1;
    }
    printf("udp: sendmmsg %d\n", sendmmsg(s, mm, 3, 0));
    int got = 0;
    while (got < 3 && datagram_waits(s)) {
        for (int i = 0; i < 3; i++) {
            v3[i] = (struct iovec){.iov_base = in[i], .iov_len = sizeof in[i]};
            mm[i].msg_hdr.msg_iov = &v3[i];
        }
        int k = recvmmsg(s, mm, 3 - got, MSG_DONTWAIT, NULL);
        for (int i = 0; i < k; i++) printf("udp: recvmmsg %.*s\n", (int)mm[i].msg_len, in[i]);
        if (k > 0) got += k;
    }
    close(s);

    /* Two sockets on one port: the connected one hears its peer, the other everyone else. */
    int one = 1;
    int a = socket(AF_INET, SOCK_DGRAM, 0), b = socket(AF_INET, SOCK_DGRAM, 0);
    setsockopt(a, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(b, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in any = {.sin_family = AF_INET};
    if (bind(a, (struct sockaddr *)&any, sizeof any) < 0) die("udp bind");
    len = sizeof any;
    getsockname(a, (struct sockaddr *)&any, &len);
    any.sin_addr.s_addr = 0;
    if (bind(b, (struct sockaddr *)&any, sizeof any) < 0) die("udp bind the same port");
    if (connect(a, (struct sockaddr *)&to, sizeof to) < 0) die("udp connect a");
    send(a, "mine", 4, 0);
    r = datagram_waits(a) ? recv(a, buf, sizeof buf, 0) : -1;
    printf("udp shared port: the connected socket heard %d bytes %.4s\n", (int)r, buf);
    send(a, "other", 5, 0);
    r = datagram_waits(b) ? recv(b, buf, sizeof buf, 0) : -1;
    printf("udp shared port: the other socket heard %d bytes %.5s\n", (int)r, buf);
    r = recv(a, buf, sizeof buf, MSG_DONTWAIT);
    printf("udp shared port: the connected one %s\n", r < 0 && errno == EAGAIN ? "heard nothing else" : "heard more");
    close(a);
    close(b);
}

static void sending_a_file(void) {
    char path[] = "/tmp/shmnet-calls-XXXXXX", buf[32];
    int f = mkstemp(path);
    if (f < 0) die("mkstemp");
    unlink(path);
    static char block[100000];
    memset(block, 'f', sizeof block);
    if (write(f, block, sizeof block) != sizeof block) die("file write");
    int s = must_dial(6001, "sendfile dial");
    off_t off = 1000;
    ssize_t n = sendfile(s, f, &off, sizeof block);
    printf("sendfile: %d bytes, offset now %d\n", (int)n, (int)off);
    lseek(f, 0, SEEK_SET);
    n = sendfile(s, f, NULL, 500);
    printf("sendfile: %d more, the file at %d\n", (int)n, (int)lseek(f, 0, SEEK_CUR));
    shutdown(s, SHUT_WR);
    int got = 0;
    ssize_t r;
    while ((r = read(s, buf + got, sizeof buf - 1 - got)) > 0) got += r;
    buf[got] = 0;
    printf("sendfile: the peer counted %s\n", buf);
    close(s);
    close(f);
}

/* MSG_PEEK and FIONREAD on a connection: bytes looked at stay for the read. */
static void *write_aboo_later(void *arg) {
    usleep(300000);
    if (write(*(int *)arg, "aboo", 4) != 4) die("peek-all late write");
    return NULL;
}

static void peeking(void) {
    char buf[16] = {0};
    int s = must_dial(6000, "peek");
    if (write(s, "peekaboo", 8) != 8) die("peek write");
    int n = 0;
    for (int i = 0; i < 500 && n < 8; i++) {
        ioctl(s, FIONREAD, &n);
        if (n < 8) usleep(10000);
    }
    printf("peek: FIONREAD %d\n", n);
    ssize_t r = recv(s, buf, 4, MSG_PEEK);
    printf("peek: peeked %d %.4s\n", (int)r, buf);
    struct pollfd p = {.fd = s, .events = POLLIN};
    printf("peek: still readable %d\n", poll(&p, 1, 0));
    r = recv(s, buf, sizeof buf, 0);
    printf("peek: then read %d %.8s\n", (int)r, buf);
    r = recv(s, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    printf("peek: then %s\n", r < 0 && errno == EAGAIN ? "EAGAIN" : "more");
    /* MSG_PEEK|MSG_WAITALL waits for all it asks for, as a plain MSG_WAITALL does: half
     * is echoed now, the other half is written 0.3 s later by another thread. */
    memset(buf, 0, sizeof buf);
    if (write(s, "peek", 4) != 4) die("peek-all write");
    pthread_t later;
    if (pthread_create(&later, NULL, write_aboo_later, &s) != 0) die("peek-all thread");
    r = recv(s, buf, 8, MSG_PEEK | MSG_WAITALL);
    printf("peek: MSG_PEEK|MSG_WAITALL peeked %d %.8s\n", (int)r, buf);
    pthread_join(later, NULL);
    memset(buf, 0, sizeof buf);
    r = recv(s, buf, 8, MSG_WAITALL);
    printf("peek: then read %d %.8s\n", (int)r, buf);
    close(s);
}

/* SO_RCVTIMEO bounds a blocking read and accept; getsockopt answers it back. */
static void timeouts(void) {
    char buf[8];
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000}, back = {0};
    int s = must_dial(6000, "timeouts");
    if (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) die("SO_RCVTIMEO");
    socklen_t len = sizeof back;
    getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &back, &len);
    printf("timeouts: SO_RCVTIMEO reads back %ld us\n", (long)back.tv_usec);
    ssize_t r = read(s, buf, sizeof buf);
    printf("timeouts: idle read %s\n", r < 0 && errno == EAGAIN ? "EAGAIN" : "?");
    if (write(s, "t", 1) != 1) die("timeouts write");
    r = read(s, buf, sizeof buf);
    printf("timeouts: then read %d\n", (int)r);
    close(s);
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    setsockopt(u, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in to = peer_at(6004);
    if (connect(u, (struct sockaddr *)&to, sizeof to) < 0) die("timeouts udp connect");
    r = recv(u, buf, sizeof buf, 0);
    printf("timeouts: idle udp recv %s\n", r < 0 && errno == EAGAIN ? "EAGAIN" : "?");
    close(u);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0) die("timeouts listen");
    r = accept(l, NULL, NULL);
    printf("timeouts: idle accept %s\n", r < 0 && errno == EAGAIN ? "EAGAIN" : "?");
    close(l);
}

/* Lengths the compiler cannot see make glibc's fortified headers call the checked entry
 * points: __poll_chk, __recv_chk, __read_chk, __recvfrom_chk. */
static void fortified(void) {
    char buf[16];
    volatile size_t want = 5;
    volatile nfds_t count = 1;
    int s = must_dial(6000, "fortified");
    if (write(s, "fort1", 5) != 5) die("fortified write");
    struct pollfd p[1] = {{.fd = s, .events = POLLIN}};
    int n = poll(p, count, 5000);
    ssize_t r = recv(s, buf, want, MSG_WAITALL);
    printf("fortified: poll %d, recv %d bytes %.5s\n", n, (int)r, buf);
    if (write(s, "fort2", 5) != 5) die("fortified write");
    poll(p, count, 5000);
    r = read(s, buf, want);
    printf("fortified: read %d bytes %.5s\n", (int)r, buf);
    if (write(s, "fort3", 5) != 5) die("fortified write");
    poll(p, count, 5000);
    r = recvfrom(s, buf, want, 0, NULL, NULL);
    printf("fortified: recvfrom %d bytes %.5s\n", (int)r, buf);
    close(s);
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
    reset_reads();
    ended_then_reset();
    ended_and_reset();
    duplicate();
    forking();
    forking_servers();
    forking_threads();
    execing();
    unseekable();
    names();
    nonblocking_connect();
    accepting();
    gathering();
    lingering();
    lingering_with_a_time();
    stop_listening();
    datagrams();
    packet_info();
    sending_a_file();
    fortified();
    timeouts();
    peeking();
    return 0;
}
