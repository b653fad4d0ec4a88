/* echo_epoll: the echo workload's limit row for a readiness loop (one thread, epoll).
 *
 *   echo_epoll
 *
 * Binds 127.0.0.1 on a free port, prints "READY <port>" and echoes on every connection until
 * it is killed: level-triggered epoll, and on each readable connection one recv() into a
 * 64 KiB buffer followed by one send() of what it read. That is the fewest system calls a
 * readiness-based server can make per message (epoll_wait is shared by every connection
 * ready in the same turn), so together with echo_load on the same machine it is the limit
 * of this kernel and load generator, the number the Python servers are compared with.
 *
 * A send the socket does not take whole (not seen with 64 B and 4 KiB messages on loopback,
 * but possible) keeps the rest, stops reading that connection and waits for EPOLLOUT, so the
 * echo stays correct whatever the socket buffers do. Built by the benchmark runner
 * (benchmarks/w_echo.py) with the system C compiler into build/benchmarks/.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUFSZ 65536
#define MAXEV 256

struct conn {
    int fd;
    size_t off, len; /* bytes of buf still to send: buf[off, len) */
    char buf[BUFSZ];
};

static int listen_any(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 1024) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        perror("echo_epoll: listen");
        exit(1);
    }
    printf("READY %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    return fd;
}

static void drop(struct conn *c) {
    close(c->fd); /* closing removes it from the epoll set */
    free(c);
}

/* Send what c holds; 1 when all of it went, 0 when the socket is full, -1 on an error. */
static int flush(struct conn *c) {
    while (c->off < c->len) {
        ssize_t w = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
        if (w < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        c->off += (size_t)w;
    }
    c->off = c->len = 0;
    return 1;
}

static void watch(int ep, struct conn *c, uint32_t events) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

int main(void) {
    int lfd = listen_any();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, events[MAXEV];
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0) {
        perror("echo_epoll: epoll");
        return 1;
    }
    for (;;) {
        int n = epoll_wait(ep, events, MAXEV, -1);
        if (n < 0 && errno != EINTR) {
            perror("echo_epoll: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c == NULL) { /* the listener: take every pending connection */
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    int one = 1;
                    struct conn *nc = malloc(sizeof *nc);
                    if (nc == NULL) {
                        close(fd);
                        continue;
                    }
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    nc->fd = fd;
                    nc->off = nc->len = 0;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev) < 0) drop(nc);
                }
                continue;
            }
            if (c->len > c->off) { /* waiting for room (EPOLLOUT): send the rest first */
                int k = flush(c);
                if (k < 0) drop(c);
                else if (k > 0) watch(ep, c, EPOLLIN);
                continue;
            }
            ssize_t r = recv(c->fd, c->buf, BUFSZ, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0) { /* closed by the peer, or reset */
                drop(c);
                continue;
            }
            c->off = 0;
            c->len = (size_t)r;
            int k = flush(c);
            if (k < 0) drop(c);
            else if (k == 0) watch(ep, c, EPOLLOUT);
        }
    }
}
