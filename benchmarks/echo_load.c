/* echo_load: the benchmarks' closed-loop TCP echo client (one thread, epoll, non-blocking).
 *
 *   echo_load HOST PORT CONNS BYTES SECONDS [RESPONSE_BYTES]
 *
 * With RESPONSE_BYTES (request/response mode: an HTTP-style server answers each request of
 * BYTES with a response of RESPONSE_BYTES), the client reads that many bytes back instead of
 * checking an echo.
 *
 * Opens CONNS connections to HOST:PORT, then on every connection: write BYTES, read until
 * BYTES came back (and check that they are the bytes sent), repeat, for SECONDS. Prints one
 * line for the runner:
 *
 *   rps=<round trips per second> p50_us=<median round trip> p99_us=<99th pct> errors=<n>
 *
 * With ECHO_LOAD_GATE=WARM in the environment (for a profiler that counts only the steady
 * state, benchmarks.connscost): after the dial, WARM seconds of load, then every connection's
 * last round trip completes (nothing in flight), the line "GATE" is printed and one line is
 * read from stdin; the SECONDS of the run follow, drained the same way, then "done=<round
 * trips>" is printed and one more line read before the connections close. Every round trip
 * counted was served between the two gates: no dial, no tear-down, no message half done.
 *
 * Latencies go into a histogram of 1/16-octave buckets (about 4 % wide) from 1 us up, so the
 * client keeps no per-request memory and costs the same at any rate. Built by the runner with
 * the system C compiler (benchmarks/w_echo.py) into build/benchmarks/.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SUB 16                 /* buckets per doubling */
#define NBUCKETS (SUB * 32)    /* 1 us .. 2^32 us */

struct conn {
    int fd;
    size_t off;          /* bytes of the current message written (writing) or read (reading) */
    int reading;
    int want_out;        /* polled for EPOLLOUT (else EPOLLIN) */
    double started;      /* when the current message's first byte was written */
};

static uint64_t hist[NBUCKETS];
static uint64_t nsamples;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void record(double seconds) {
    double us = seconds * 1e6;
    int b = us <= 1.0 ? 0 : (int)(log2(us) * SUB);
    if (b >= NBUCKETS) b = NBUCKETS - 1;
    hist[b]++;
    nsamples++;
}

/* The upper edge of the bucket holding the q-quantile, in microseconds. */
static double quantile(double q) {
    if (nsamples == 0) return 0.0;
    uint64_t want = (uint64_t)ceil(q * (double)nsamples), seen = 0;
    for (int b = 0; b < NBUCKETS; b++) {
        seen += hist[b];
        if (seen >= want && seen > 0) return exp2((double)(b + 1) / SUB);
    }
    return exp2((double)NBUCKETS / SUB);
}

/* A blocking connect (the server may be slow to accept), then non-blocking for the run. */
static int dial(const struct sockaddr_in *sa) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0) {
        close(fd);
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Move connection c on by what its socket allows now, with the fewest system calls: one
 * recv when it waits for the echo, then (the message complete) one send of the next message.
 * Returns the number of round trips completed (0 or 1), or -1 on an error (a reset, an early
 * close, or echoed bytes that differ from those sent). */
static size_t resp_n; /* bytes of each answer: n for an echo */
static int draining;   /* a round trip that completes starts no next message (ECHO_LOAD_GATE) */

static int advance(struct conn *c, const char *msg, char *buf, size_t n, double *t) {
    int rounds = 0;
    if (c->reading) {
        ssize_t r = recv(c->fd, buf + c->off, resp_n - c->off, 0);
        if (r < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        if (r == 0) return -1; /* the server closed the connection mid-run */
        c->off += (size_t)r;
        if (c->off < resp_n) return 0;
        if (resp_n == n && memcmp(buf, msg, n) != 0) return -1; /* an echo returns the bytes sent */
        *t = now();
        record(*t - c->started);
        rounds = 1;
        c->reading = 0;
        c->off = 0;
        if (draining) return rounds;
    }
    if (c->off == 0) c->started = *t;
    while (c->off < n) {
        ssize_t w = send(c->fd, msg + c->off, n - c->off, MSG_NOSIGNAL);
        if (w < 0) return (errno == EAGAIN || errno == EINTR) ? rounds : -1;
        c->off += (size_t)w;
    }
    c->reading = 1;
    c->off = 0;
    return rounds;
}

/* Poll c for writing only while a message waits for room in its socket buffer. */
static void watch(int ep, struct conn *c, uint32_t id) {
    int want_out = !c->reading && c->off > 0;
    if (want_out == c->want_out) return;
    c->want_out = want_out;
    struct epoll_event ev = {.events = want_out ? EPOLLOUT : EPOLLIN, .data.u32 = id};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* The run's state, shared by main and phase. */
static struct conn *conns;
static struct epoll_event *events;
static int ep, nconn;
static char *msg;
static char *buf;
static size_t n;

/* Every connection starts a message, and round trips go on until *end*; with *drain*, until
 * then and every message in flight has come back. Returns the round trips completed. */
static long phase(double end, int drain, double *t, long *errors) {
    long done = 0;
    draining = 0;
    for (int i = 0; i < nconn; i++) { /* every connection starts its first message */
        int k = advance(&conns[i], msg, buf, n, t);
        if (k < 0) (*errors)++; else done += k;
        watch(ep, &conns[i], (uint32_t)i);
    }
    while (*errors == 0) {
        if (*t >= end) {
            if (!drain) break;
            draining = 1;
            int busy = 0;
            for (int i = 0; i < nconn && !busy; i++) busy = conns[i].reading || conns[i].off;
            if (!busy) break;
        }
        int ready = epoll_wait(ep, events, nconn, 100);
        if (ready < 0 && errno != EINTR) {
            perror("echo_load: epoll_wait");
            exit(1);
        }
        *t = now();
        for (int e = 0; e < ready; e++) {
            struct conn *c = &conns[events[e].data.u32];
            int k = advance(c, msg, buf, n, t);
            if (k < 0) { (*errors)++; break; }
            done += k;
            watch(ep, c, events[e].data.u32);
        }
    }
    return done;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s HOST PORT CONNS BYTES SECONDS [RESPONSE_BYTES]\n", argv[0]);
        return 2;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
        fprintf(stderr, "echo_load: bad IPv4 address %s\n", argv[1]);
        return 2;
    }
    nconn = atoi(argv[3]);
    long nbytes = atol(argv[4]);
    double seconds = atof(argv[5]);
    if (nconn < 1 || nbytes < 1 || seconds <= 0) {
        fprintf(stderr, "echo_load: CONNS and BYTES must be >= 1 and SECONDS > 0\n");
        return 2;
    }
    n = (size_t)nbytes;
    resp_n = argc == 7 ? (size_t)atol(argv[6]) : n;
    if (resp_n < 1) {
        fprintf(stderr, "echo_load: RESPONSE_BYTES must be >= 1\n");
        return 2;
    }
    msg = malloc(n);
    buf = malloc(resp_n > n ? resp_n : n);
    conns = calloc((size_t)nconn, sizeof *conns);
    events = calloc((size_t)nconn, sizeof *events);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (!msg || !buf || !conns || !events || ep < 0) {
        perror("echo_load: setup");
        return 1;
    }
    for (size_t i = 0; i < n; i++) msg[i] = (char)('a' + i % 26);
    if (argc == 7 && n >= 4) memcpy(msg + n - 4, "\r\n\r\n", 4); /* a request's end */

    for (int i = 0; i < nconn; i++) {
        conns[i].fd = dial(&sa);
        if (conns[i].fd < 0) {
            fprintf(stderr, "echo_load: connect %s:%s: %s\n", argv[1], argv[2], strerror(errno));
            return 1;
        }
        /* level-triggered: a connection is polled for whichever direction it waits on */
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
    }

    const char *gate = getenv("ECHO_LOAD_GATE");
    if (gate == NULL) {
        double start = now(), t = start;
        long errors = 0, done = phase(start + seconds, 0, &t, &errors);
        double elapsed = now() - start;
        for (int i = 0; i < nconn; i++) close(conns[i].fd);
        printf("rps=%.3f p50_us=%.1f p99_us=%.1f errors=%ld\n", (double)done / elapsed,
               quantile(0.50), quantile(0.99), errors);
        return 0;
    }
    double t = now();
    long errors = 0;
    char line[64];
    phase(t + atof(gate), 1, &t, &errors);
    printf("GATE\n");
    fflush(stdout);
    if (errors || !fgets(line, sizeof line, stdin)) return 1;
    double start = now();
    t = start;
    long done = phase(start + seconds, 1, &t, &errors);
    printf("done=%ld rps=%.3f errors=%ld\n", done, (double)done / (now() - start), errors);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    for (int i = 0; i < nconn; i++) close(conns[i].fd);
    return errors ? 1 : 0;
}
