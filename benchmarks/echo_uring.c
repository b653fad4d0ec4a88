/* echo_uring: the echo workload's limit row for a completion loop (one thread, io_uring).
 *
 *   echo_uring [coop|plain|defer]
 *
 * Binds 127.0.0.1 on a free port, prints "READY <port> flags=<ring flags>" and echoes on every
 * connection until it is killed: one IORING_OP_RECV SQE into the connection's 64 KiB buffer,
 * and when it completes one IORING_OP_SEND SQE of what it read (the rest again if the send was
 * short), then the next recv. Each turn of the loop is a single io_uring_enter that submits
 * every SQE queued since the last one and waits for at least one completion; the completions
 * are then read from the shared ring without a system call. No eventfd, no buffer ring, no
 * multishot: the plainest io_uring server, and so the kernel's own cost of an io_uring echo on
 * this machine, which tinycoro's system time per request is compared with.
 *
 * Ring setup flags: "coop" (the default) is COOP_TASKRUN | TASKRUN_FLAG, as tinycoro's rings,
 * falling back to none where the kernel refuses it; "plain" is none; "defer" is SINGLE_ISSUER
 * | DEFER_TASKRUN (completions run only inside io_uring_enter(GETEVENTS), which this loop
 * always passes), falling back to none.
 *
 * Raw system calls on the kernel's io_uring ABI: it needs only the io_uring.h header, the
 * copy the liburing binding ships (the runner passes its include directory) or the system's
 * <linux/io_uring.h>. Built by the benchmark runner (benchmarks/w_echo.py) with the system C
 * compiler into build/benchmarks/.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__has_include) && __has_include(<liburing/io_uring.h>)
#include <liburing/io_uring.h>
#else
#include <linux/io_uring.h>
#endif

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_io_uring_enter
#define __NR_io_uring_enter 426
#endif

#define ENTRIES 1024
#define BUFSZ 65536

enum { RECV, SEND };

struct conn {
    int fd;
    int op;          /* the one operation in flight: RECV or SEND */
    size_t off, len; /* while sending: buf[off, len) is still to go */
    char buf[BUFSZ];
};

static struct {
    int fd;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    unsigned sq_entries;
    unsigned tail;    /* our copy of the SQ tail, published at each enter */
    unsigned queued;  /* SQEs written since the last enter */
} ring;

static int uring_setup(unsigned entries, unsigned flags, struct io_uring_params *p) {
    memset(p, 0, sizeof *p);
    p->flags = flags;
    return (int)syscall(__NR_io_uring_setup, entries, p);
}

static int uring_enter(unsigned submit, unsigned wait, unsigned flags) {
    return (int)syscall(__NR_io_uring_enter, ring.fd, submit, wait, flags, NULL, 0);
}

/* Set up the ring with the flags of *mode*; returns the name of the flags in use. */
static const char *ring_init(const char *mode) {
    struct io_uring_params p;
    unsigned want = 0;
    const char *name = "none";
    if (strcmp(mode, "coop") == 0) {
        want = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
        name = "COOP_TASKRUN";
    } else if (strcmp(mode, "defer") == 0) {
        want = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
        name = "SINGLE_ISSUER|DEFER_TASKRUN";
    } else if (strcmp(mode, "plain") != 0) {
        fprintf(stderr, "usage: echo_uring [coop|plain|defer]\n");
        exit(2);
    }
    ring.fd = uring_setup(ENTRIES, want, &p);
    if (ring.fd < 0 && want != 0 && errno == EINVAL) { /* a kernel without the flags */
        name = "none";
        ring.fd = uring_setup(ENTRIES, 0, &p);
    }
    if (ring.fd < 0) {
        perror("echo_uring: io_uring_setup");
        exit(1);
    }
    size_t sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    int single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single && cq_size > sq_size) sq_size = cq_size;
    char *sq = mmap(NULL, sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring.fd,
                    IORING_OFF_SQ_RING);
    char *cq = single ? sq
                      : mmap(NULL, cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                             ring.fd, IORING_OFF_CQ_RING);
    void *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_POPULATE, ring.fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) {
        perror("echo_uring: mmap");
        exit(1);
    }
    ring.sq_head = (unsigned *)(sq + p.sq_off.head);
    ring.sq_tail = (unsigned *)(sq + p.sq_off.tail);
    ring.sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    ring.sq_array = (unsigned *)(sq + p.sq_off.array);
    ring.cq_head = (unsigned *)(cq + p.cq_off.head);
    ring.cq_tail = (unsigned *)(cq + p.cq_off.tail);
    ring.cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    ring.cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    ring.sqes = sqes;
    ring.sq_entries = p.sq_entries;
    ring.tail = *ring.sq_tail;
    return name;
}

/* Hand the queued SQEs to the kernel and wait for *wait* completions; the one system call of
 * a loop turn. */
static void submit(unsigned wait) {
    __atomic_store_n(ring.sq_tail, ring.tail, __ATOMIC_RELEASE);
    for (;;) {
        int r = uring_enter(ring.queued, wait, wait ? IORING_ENTER_GETEVENTS : 0);
        if (r >= 0) {
            ring.queued -= (unsigned)r < ring.queued ? (unsigned)r : ring.queued;
            if (ring.queued == 0 || wait) return;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EBUSY) return; /* retried on the next turn */
        perror("echo_uring: io_uring_enter");
        exit(1);
    }
}

static struct io_uring_sqe *get_sqe(void) {
    unsigned head = __atomic_load_n(ring.sq_head, __ATOMIC_ACQUIRE);
    if (ring.tail - head >= ring.sq_entries) { /* full (not with 50 connections): submit now */
        submit(0);
        head = __atomic_load_n(ring.sq_head, __ATOMIC_ACQUIRE);
        if (ring.tail - head >= ring.sq_entries) {
            fprintf(stderr, "echo_uring: submission queue full\n");
            exit(1);
        }
    }
    unsigned idx = ring.tail & *ring.sq_mask;
    struct io_uring_sqe *sqe = &ring.sqes[idx];
    memset(sqe, 0, sizeof *sqe);
    ring.sq_array[idx] = idx;
    ring.tail++;
    ring.queued++;
    return sqe;
}

static void queue_accept(int lfd) {
    struct io_uring_sqe *sqe = get_sqe();
    sqe->opcode = IORING_OP_ACCEPT;
    sqe->fd = lfd;
    sqe->accept_flags = SOCK_CLOEXEC;
    sqe->user_data = 0; /* 0 marks the listener's accept; connections are pointers */
}

static void queue_recv(struct conn *c) {
    struct io_uring_sqe *sqe = get_sqe();
    sqe->opcode = IORING_OP_RECV;
    sqe->fd = c->fd;
    sqe->addr = (uint64_t)(uintptr_t)c->buf;
    sqe->len = BUFSZ;
    sqe->user_data = (uint64_t)(uintptr_t)c;
    c->op = RECV;
}

static void queue_send(struct conn *c) {
    struct io_uring_sqe *sqe = get_sqe();
    sqe->opcode = IORING_OP_SEND;
    sqe->fd = c->fd;
    sqe->addr = (uint64_t)(uintptr_t)(c->buf + c->off);
    sqe->len = (unsigned)(c->len - c->off);
    sqe->msg_flags = MSG_NOSIGNAL;
    sqe->user_data = (uint64_t)(uintptr_t)c;
    c->op = SEND;
}

static int listen_any(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 1024) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        perror("echo_uring: listen");
        exit(1);
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

static void complete(int lfd, struct io_uring_cqe *cqe) {
    struct conn *c = (struct conn *)(uintptr_t)cqe->user_data;
    int res = cqe->res;
    if (c == NULL) { /* an accepted connection (or a failed accept): accept the next one */
        if (res >= 0) {
            int one = 1;
            struct conn *nc = malloc(sizeof *nc);
            if (nc == NULL) {
                close(res);
            } else {
                setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                nc->fd = res;
                nc->off = nc->len = 0;
                queue_recv(nc);
            }
        }
        queue_accept(lfd);
        return;
    }
    if (res == -EINTR || res == -EAGAIN) { /* nothing happened: ask again */
        if (c->op == RECV) queue_recv(c);
        else queue_send(c);
        return;
    }
    if (res <= 0) { /* closed by the peer, reset, or a send to a closed socket */
        close(c->fd);
        free(c);
        return;
    }
    if (c->op == RECV) {
        c->off = 0;
        c->len = (size_t)res;
        queue_send(c);
        return;
    }
    c->off += (size_t)res;
    if (c->off < c->len) queue_send(c); /* a short send: the rest */
    else queue_recv(c);
}

int main(int argc, char **argv) {
    int port;
    int lfd = listen_any(&port);
    const char *flags = ring_init(argc > 1 ? argv[1] : "coop");
    printf("READY %d flags=%s\n", port, flags);
    fflush(stdout);
    queue_accept(lfd);
    for (;;) {
        submit(1);
        unsigned head = *ring.cq_head;
        unsigned tail = __atomic_load_n(ring.cq_tail, __ATOMIC_ACQUIRE);
        while (head != tail) {
            complete(lfd, &ring.cqes[head & *ring.cq_mask]);
            head++;
        }
        __atomic_store_n(ring.cq_head, head, __ATOMIC_RELEASE);
    }
}
