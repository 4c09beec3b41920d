/*
 * linkemu: a userspace WAN link between two network namespaces.
 *
 * The kernel on our machines has no netem, so the link is emulated here: one
 * TUN device in each namespace, and one thread per direction that reads
 * packets from one device, schedules them, and writes them into the other.
 *
 * Each packet that arrives at time `now` leaves at
 *     finish = max(now, previous finish) + size / rate      (serialisation)
 *     release = finish + one-way delay                      (propagation)
 * and is dropped at the tail when the bytes still waiting to be serialised
 * (the bottleneck backlog) plus this packet exceed the queue limit. Packets
 * are kept in one byte ring per direction in arrival order; that thread is the
 * only reader and writer of its ring, so no locks are needed. Wake-ups are
 * batched to about BATCH_NS so that a 500 Mbit/s link costs a fraction of a
 * core rather than one wake-up per packet.
 *
 * Offload (the default): both devices are opened with a virtio-net header and
 * TSO/checksum offload, so each kernel hands over TCP super-frames of up to
 * 64 KiB (GSO) instead of 1500-byte packets, and the receiving kernel takes
 * them whole, as a NIC with GRO would deliver them. One read and one write
 * then move ~40 segments, which is what makes the emulator cheap enough to
 * share 2 cores with the endpoints it serves. Timing stays per wire segment:
 * a frame is serialised for the bytes its segments would carry on the wire
 * (payload plus one IP+TCP header per segment) and counted as that many
 * packets; the drop-tail decision is taken per frame (a whole burst of
 * segments is dropped together, as a full router queue does to a burst).
 * --no-offload restores one packet per read.
 *
 * Random loss (loss_ppb, parts per billion per wire packet; 0 by default): a
 * packet is lost on the wire after it was serialised, so it still takes its
 * time at the bottleneck, independently of every other packet (Bernoulli, from
 * a xorshift generator per direction seeded with --seed). Segments of one GSO
 * frame cannot be delivered apart, so under offload a frame of k segments is
 * lost whole with probability 1 - (1 - p)^k: the expected number of packets
 * lost is right but they come in bursts; --no-offload gives one loss event per
 * lost packet, which is what the Mathis model (rate ~ MSS / (RTT sqrt(p)))
 * assumes.
 *
 * Parameters live in atomics and change while the link runs through a
 * line-based UNIX socket (one command per connection, one reply line):
 *     set [dir=fwd|rev|both] [delay_us=N] [rate_bps=N] [queue_bytes=N] [loss_ppb=N]
 *     blackhole ms=N        drop everything, both ways, for N ms
 *     stats                 counters per direction
 *     quit
 * "fwd" is src -> dst, "rev" is dst -> src.
 *
 * Usage: linkemu --tag TAG --src-ns PATH --dst-ns PATH --dev NAME
 *                --ctl SOCKET --delay-us N --rate-bps N [--rate-bps-rev N]
 *                --queue-bytes N [--ring-bytes N] [--loss-ppb N] [--seed N]
 *                [--watch-stdin] [--no-offload]
 * It prints "ready" on stdout once both devices are attached. With
 * --watch-stdin it exits when stdin reaches end of file: the owner keeps the
 * other end of a pipe open, so the link dies with the owning process however
 * that process ends (PR_SET_PDEATHSIG would fire when the *thread* that
 * started us exits, which is the wrong lifetime).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BATCH_NS 100000ULL     /* wake-ups are at least this far apart under load */
#define EARLY_NS (BATCH_NS / 2) /* release this early so the mean error is ~0 */
#define MAX_PKT (65536 + 64) /* a 64 KiB GSO frame plus its virtio-net header */
#define READS_PER_WAKE 512
#define RT_PRIORITY 10

struct pkt_hdr {
    uint64_t release_ns; /* 0 marks "wrap to the start of the ring" */
    uint32_t len;        /* bytes read from the device (virtio-net header included) */
    uint32_t wire;       /* bytes the frame's segments occupy on the wire */
    uint32_t segs;       /* wire packets the frame stands for */
    uint32_t pad;
};

struct params {
    _Atomic uint64_t delay_ns;
    _Atomic uint64_t rate_bps;
    _Atomic uint64_t queue_bytes;
    _Atomic uint64_t loss_ppb; /* random loss per wire packet, parts per billion */
};

struct counters {
    _Atomic uint64_t rx_pkts, rx_bytes, tx_pkts, tx_bytes;
    _Atomic uint64_t drop_queue, drop_blackhole, drop_ring, drop_loss;
    _Atomic uint64_t max_backlog;
    _Atomic uint64_t tx_frames; /* writes: below tx_pkts when frames carry several segments */
};

struct direction {
    const char *name;
    int in_fd, out_fd;
    struct params p;
    struct counters c;
    unsigned char *ring;
    size_t ring_size;
    size_t head, tail; /* bytes: head = oldest packet, tail = next write */
    size_t used;
    uint64_t finish_ns;  /* when the last accepted packet is fully serialised */
    uint64_t rng;        /* xorshift64 state; only this direction's thread touches it */
    uint64_t last_release_ns;
};

static struct direction dirs[2];
static _Atomic uint64_t blackhole_until_ns;
static int offload = 1;                                  /* virtio-net header + TSO on both devices */
static const size_t VHDR = sizeof(struct virtio_net_hdr); /* 10 bytes: no mergeable buffers */
static volatile sig_atomic_t stopping;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "linkemu: %s: %s\n", what, strerror(errno));
    exit(1);
}

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Uniform in [0, 1e9): xorshift64 (Marsaglia), plenty for a loss coin. */
static uint64_t rand_ppb(struct direction *d) {
    uint64_t x = d->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    d->rng = x;
    return (x >> 11) % 1000000000ULL;
}

/* Whether a frame standing for `segs` wire packets is lost: any of its packets
 * lost loses it (one coin per packet, so the rate per packet is exact). */
static int lost(struct direction *d, uint32_t segs) {
    uint64_t ppb = atomic_load(&d->p.loss_ppb);
    if (!ppb) return 0;
    for (uint32_t i = 0; i < segs; i++)
        if (rand_ppb(d) < ppb) return 1;
    return 0;
}

/* Opens (attaches to) TUN device `dev` inside the namespace at `ns_path`;
 * with `want_offload`, returns -1 when the kernel refuses the offloads. */
static int open_tun_in(const char *ns_path, const char *dev, int want_offload) {
    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    int ns = open(ns_path, O_RDONLY | O_CLOEXEC);
    if (home < 0 || ns < 0) die(ns_path);
    if (setns(ns, CLONE_NEWNET) < 0) die("setns");
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) die("/dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (want_offload ? IFF_VNET_HDR : 0);
    strncpy(ifr.ifr_name, dev, IFNAMSIZ - 1);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) die("TUNSETIFF");
    if (want_offload) {
        int sz = (int)VHDR;
        if (ioctl(fd, TUNSETVNETHDRSZ, &sz) < 0 ||
            ioctl(fd, TUNSETOFFLOAD, (unsigned long)(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)) < 0) {
            fprintf(stderr, "linkemu: %s: offload refused (%s), one packet per read\n", dev, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        if (setns(home, CLONE_NEWNET) < 0) die("setns back");
        close(ns);
        close(home);
        return -1;
    }
    if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0) die("O_NONBLOCK");
    if (setns(home, CLONE_NEWNET) < 0) die("setns back");
    close(ns);
    close(home);
    return fd;
}

/* Contiguous room for one maximal packet at the tail, wrapping if needed;
 * NULL when the ring is full. `used` tells a full ring from an empty one. */
static unsigned char *ring_reserve(struct direction *d) {
    const size_t need = sizeof(struct pkt_hdr) + MAX_PKT;
    if (d->used == 0) {
        d->head = d->tail = 0;
        return d->ring;
    }
    if (d->tail > d->head) {
        if (d->ring_size - d->tail >= need) return d->ring + d->tail;
        if (d->head < need) return NULL;
        /* Wrap: mark the unused end so the reader skips it (an 8-byte end
         * is too short for a marker and is skipped by size). */
        if (d->ring_size - d->tail >= sizeof(struct pkt_hdr)) {
            struct pkt_hdr *w = (struct pkt_hdr *)(d->ring + d->tail);
            w->release_ns = 0;
            w->len = 0;
        }
        d->used += d->ring_size - d->tail;
        d->tail = 0;
        return d->ring;
    }
    return d->head - d->tail >= need ? d->ring + d->tail : NULL;
}

static void ring_commit(struct direction *d, uint32_t len, uint32_t wire, uint32_t segs, uint64_t release_ns) {
    struct pkt_hdr *h = (struct pkt_hdr *)(d->ring + d->tail);
    h->release_ns = release_ns;
    h->len = len;
    h->wire = wire;
    h->segs = segs;
    size_t adv = align8(sizeof(struct pkt_hdr) + len);
    d->tail += adv;
    d->used += adv;
    if (d->tail == d->ring_size) d->tail = 0;
}

static struct pkt_hdr *ring_peek(struct direction *d) {
    while (d->used) {
        if (d->ring_size - d->head < sizeof(struct pkt_hdr)) {
            d->used -= d->ring_size - d->head;
            d->head = 0;
            continue;
        }
        struct pkt_hdr *h = (struct pkt_hdr *)(d->ring + d->head);
        if (h->release_ns == 0) { /* wrap marker */
            d->used -= d->ring_size - d->head;
            d->head = 0;
            continue;
        }
        return h;
    }
    d->head = d->tail = 0;
    return NULL;
}

static void ring_pop(struct direction *d, struct pkt_hdr *h) {
    size_t adv = align8(sizeof(struct pkt_hdr) + h->len);
    d->head += adv;
    d->used -= adv;
    if (d->head == d->ring_size) d->head = 0;
    if (d->used == 0) d->head = d->tail = 0;
}

/* Wire bytes and packet count of what read() returned: one packet without
 * offload; with it, the segments a GSO frame will be cut into (payload split
 * at gso_size, the IP+TCP header repeated on each). */
static uint32_t wire_size(const unsigned char *buf, size_t n, uint32_t *segs) {
    *segs = 1;
    if (!offload) return (uint32_t)n;
    if (n < VHDR) return 0;
    const struct virtio_net_hdr *vh = (const struct virtio_net_hdr *)buf;
    const unsigned char *ip = buf + VHDR;
    size_t iplen = n - VHDR;
    unsigned gso = vh->gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
    if (gso == VIRTIO_NET_HDR_GSO_NONE || vh->gso_size == 0 || iplen < 20) return (uint32_t)iplen;
    size_t l3 = 0;
    if ((ip[0] >> 4) == 4 && ip[9] == 6) l3 = (size_t)(ip[0] & 0x0f) * 4;
    else if ((ip[0] >> 4) == 6 && iplen >= 40 && ip[6] == 6) l3 = 40;
    size_t hl = 0;
    if (l3 && iplen >= l3 + 20) hl = l3 + (size_t)(ip[l3 + 12] >> 4) * 4;
    else hl = vh->hdr_len; /* unusual header chain: trust the kernel's figure */
    if (hl == 0 || hl >= iplen) return (uint32_t)iplen;
    size_t payload = iplen - hl;
    size_t k = (payload + vh->gso_size - 1) / vh->gso_size;
    *segs = (uint32_t)k;
    return (uint32_t)(iplen + (k - 1) * hl);
}

/* Reads every packet waiting on the input device and schedules it. */
static void ingest(struct direction *d) {
    static __thread unsigned char scratch[MAX_PKT];
    for (int i = 0; i < READS_PER_WAKE; i++) {
        unsigned char *slot = ring_reserve(d);
        unsigned char *buf = slot ? slot + sizeof(struct pkt_hdr) : scratch;
        ssize_t n = read(d->in_fd, buf, MAX_PKT);
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN && errno != EINTR) die("read tun");
            return;
        }
        uint64_t now = now_ns();
        uint32_t segs;
        uint64_t wire = wire_size(buf, (size_t)n, &segs);
        atomic_fetch_add(&d->c.rx_pkts, segs);
        atomic_fetch_add(&d->c.rx_bytes, wire);
        if (now < atomic_load(&blackhole_until_ns)) {
            atomic_fetch_add(&d->c.drop_blackhole, segs);
            continue;
        }
        if (!slot) {
            atomic_fetch_add(&d->c.drop_ring, segs);
            continue;
        }
        uint64_t rate = atomic_load(&d->p.rate_bps);
        uint64_t qlimit = atomic_load(&d->p.queue_bytes);
        /* Bytes not yet serialised = time left on the wire x rate. */
        uint64_t backlog = d->finish_ns > now
            ? (uint64_t)((double)(d->finish_ns - now) * (double)rate / 8e9) : 0;
        if (backlog + wire > qlimit) {
            atomic_fetch_add(&d->c.drop_queue, segs);
            continue;
        }
        if (backlog + wire > atomic_load(&d->c.max_backlog))
            atomic_store(&d->c.max_backlog, backlog + wire);
        uint64_t start = d->finish_ns > now ? d->finish_ns : now;
        d->finish_ns = start + wire * 8000000000ULL / (rate ? rate : 1);
        if (lost(d, segs)) { /* on the wire, after its serialisation time */
            atomic_fetch_add(&d->c.drop_loss, segs);
            continue;
        }
        uint64_t release = d->finish_ns + atomic_load(&d->p.delay_ns);
        /* FIFO: a delay cut while packets are queued must not reorder them. */
        if (release < d->last_release_ns) release = d->last_release_ns;
        d->last_release_ns = release;
        ring_commit(d, (uint32_t)n, (uint32_t)wire, segs, release);
    }
}

/* Writes out every packet due by `now + EARLY_NS`; returns the next due time or 0. */
static uint64_t release_due(struct direction *d, uint64_t now) {
    struct pkt_hdr *h;
    while ((h = ring_peek(d)) != NULL) {
        if (h->release_ns > now + EARLY_NS) return h->release_ns;
        if (now < atomic_load(&blackhole_until_ns)) {
            atomic_fetch_add(&d->c.drop_blackhole, h->segs);
        } else {
            ssize_t n = write(d->out_fd, (unsigned char *)h + sizeof *h, h->len);
            if (n == (ssize_t)h->len) {
                atomic_fetch_add(&d->c.tx_pkts, h->segs);
                atomic_fetch_add(&d->c.tx_bytes, h->wire);
                atomic_fetch_add(&d->c.tx_frames, 1);
            } else {
                atomic_fetch_add(&d->c.drop_ring, h->segs); /* device down or full */
            }
        }
        ring_pop(d, h);
    }
    return 0;
}

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ULL), .tv_nsec = (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !stopping) {}
}

static void *pump(void *arg) {
    struct direction *d = arg;
    struct pollfd pfd = {.fd = d->in_fd, .events = POLLIN};
    uint64_t last_wake = 0;
    prctl(PR_SET_TIMERSLACK, 1000UL); /* 1 us: default 50 us slack would blur the batching */
    /* The link is the network, not a workload: it must not be starved by
     * whatever else runs on a shared 2-core machine, or RTT and rate drift.
     * SCHED_FIFO needs root; the kernel's RT throttling still leaves 5 % to others. */
    struct sched_param sp = {.sched_priority = RT_PRIORITY};
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) != 0)
        fprintf(stderr, "linkemu: %s: no real-time priority, timing may drift under CPU load\n", d->name);
    while (!stopping) {
        uint64_t now = now_ns();
        last_wake = now;
        ingest(d);
        now = now_ns();
        uint64_t next = release_due(d, now);
        int64_t wait_ns;
        if (next == 0) {
            wait_ns = 200000000; /* idle: block on input (re-check `stopping` now and then) */
        } else {
            now = now_ns();
            wait_ns = (int64_t)(next - EARLY_NS) - (int64_t)now;
            if (wait_ns < 0) wait_ns = 0;
        }
        struct timespec ts = {.tv_sec = wait_ns / 1000000000LL, .tv_nsec = wait_ns % 1000000000LL};
        int r = ppoll(&pfd, 1, &ts, NULL);
        if (r < 0 && errno != EINTR) die("ppoll");
        /* Input woke us early: let a few more packets gather before reading,
         * so the pair of threads wakes ~10^4 times a second, not once per packet. */
        if (r > 0 && next != 0) {
            uint64_t since = now_ns() - last_wake;
            uint64_t room = next > now_ns() ? next - now_ns() : 0;
            if (since < BATCH_NS) {
                uint64_t nap = BATCH_NS - since;
                if (nap > room) nap = room;
                if (nap) sleep_ns(nap);
            }
        }
    }
    return NULL;
}

static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

static int parse_kv(const char *tok, const char *key, uint64_t *out) {
    size_t k = strlen(key);
    if (strncmp(tok, key, k) != 0 || tok[k] != '=') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(tok + k + 1, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 1;
}

static void format_stats(char *out, size_t cap) {
    size_t off = 0;
    for (int i = 0; i < 2; i++) {
        struct direction *d = &dirs[i];
        off += (size_t)snprintf(out + off, cap - off,
            "%s%s rx_pkts=%llu rx_bytes=%llu tx_pkts=%llu tx_bytes=%llu drop_queue=%llu "
            "drop_blackhole=%llu drop_ring=%llu drop_loss=%llu max_backlog=%llu tx_frames=%llu offload=%d "
            "delay_us=%llu rate_bps=%llu queue_bytes=%llu loss_ppb=%llu",
            i ? " ; " : "", d->name,
            (unsigned long long)d->c.rx_pkts, (unsigned long long)d->c.rx_bytes,
            (unsigned long long)d->c.tx_pkts, (unsigned long long)d->c.tx_bytes,
            (unsigned long long)d->c.drop_queue, (unsigned long long)d->c.drop_blackhole,
            (unsigned long long)d->c.drop_ring, (unsigned long long)d->c.drop_loss,
            (unsigned long long)d->c.max_backlog,
            (unsigned long long)d->c.tx_frames, offload,
            (unsigned long long)(atomic_load(&d->p.delay_ns) / 1000),
            (unsigned long long)atomic_load(&d->p.rate_bps),
            (unsigned long long)atomic_load(&d->p.queue_bytes),
            (unsigned long long)atomic_load(&d->p.loss_ppb));
        if (off >= cap) break;
    }
}

/* Handles one control command; writes one reply line into `reply`. */
static void control(char *line, char *reply, size_t cap) {
    char *save = NULL;
    char *cmd = strtok_r(line, " \t\r\n", &save);
    if (!cmd) { snprintf(reply, cap, "error empty command\n"); return; }
    if (!strcmp(cmd, "stats")) {
        format_stats(reply, cap - 2);
        strcat(reply, "\n");
        return;
    }
    if (!strcmp(cmd, "quit")) { stopping = 1; snprintf(reply, cap, "ok\n"); return; }
    if (!strcmp(cmd, "blackhole")) {
        uint64_t ms = 0;
        char *tok = strtok_r(NULL, " \t\r\n", &save);
        if (!tok || parse_kv(tok, "ms", &ms) != 1) { snprintf(reply, cap, "error usage: blackhole ms=N\n"); return; }
        atomic_store(&blackhole_until_ns, now_ns() + ms * 1000000ULL);
        snprintf(reply, cap, "ok\n");
        return;
    }
    if (!strcmp(cmd, "set")) {
        int lo = 0, hi = 1;
        uint64_t delay = UINT64_MAX, rate = UINT64_MAX, queue = UINT64_MAX, loss = UINT64_MAX, v;
        for (char *tok; (tok = strtok_r(NULL, " \t\r\n", &save)) != NULL;) {
            if (!strcmp(tok, "dir=fwd")) { lo = 0; hi = 0; continue; }
            if (!strcmp(tok, "dir=rev")) { lo = 1; hi = 1; continue; }
            if (!strcmp(tok, "dir=both")) { lo = 0; hi = 1; continue; }
            if (parse_kv(tok, "delay_us", &v) == 1) { delay = v * 1000ULL; continue; }
            if (parse_kv(tok, "rate_bps", &v) == 1 && v > 0) { rate = v; continue; }
            if (parse_kv(tok, "queue_bytes", &v) == 1) { queue = v; continue; }
            if (parse_kv(tok, "loss_ppb", &v) == 1 && v <= 1000000000ULL) { loss = v; continue; }
            snprintf(reply, cap, "error bad argument %s\n", tok);
            return;
        }
        for (int i = lo; i <= hi; i++) {
            if (delay != UINT64_MAX) atomic_store(&dirs[i].p.delay_ns, delay);
            if (rate != UINT64_MAX) atomic_store(&dirs[i].p.rate_bps, rate);
            if (queue != UINT64_MAX) atomic_store(&dirs[i].p.queue_bytes, queue);
            if (loss != UINT64_MAX) atomic_store(&dirs[i].p.loss_ppb, loss);
        }
        snprintf(reply, cap, "ok\n");
        return;
    }
    snprintf(reply, cap, "error unknown command %s\n", cmd);
}

static int listen_control(const char *path) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) die("socket");
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) { errno = ENAMETOOLONG; die(path); }
    strcpy(addr.sun_path, path);
    unlink(path);
    if (bind(s, (struct sockaddr *)&addr, sizeof addr) < 0) die(path);
    chmod(path, 0600);
    if (listen(s, 8) < 0) die("listen");
    return s;
}

static void serve_control(int s, const char *path, int watch_stdin) {
    struct pollfd pfd[2] = {{.fd = s, .events = POLLIN}, {.fd = watch_stdin ? 0 : -1, .events = POLLIN}};
    while (!stopping) {
        int r = poll(pfd, 2, 200);
        if (r <= 0) continue;
        if (pfd[1].revents) {
            char b[64];
            if (read(0, b, sizeof b) <= 0) break; /* owner gone */
        }
        if (!(pfd[0].revents & POLLIN)) continue;
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) continue;
        char line[512] = {0}, reply[2048] = {0};
        size_t got = 0;
        /* One short command per connection; give a slow client 1 s. */
        struct timeval tv = {.tv_sec = 1};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        while (got < sizeof line - 1) {
            ssize_t n = read(c, line + got, sizeof line - 1 - got);
            if (n <= 0) break;
            got += (size_t)n;
            if (memchr(line, '\n', got)) break;
        }
        control(line, reply, sizeof reply);
        ssize_t w = write(c, reply, strlen(reply));
        (void)w;
        close(c);
    }
    close(s);
    unlink(path);
}

int main(int argc, char **argv) {
    const char *src_ns = NULL, *dst_ns = NULL, *dev = "wan0", *ctl = NULL;
    uint64_t delay_us = 0, rate = 0, rate_rev = 0, queue = 0, ring = 0, loss = 0, seed = 1;
    int watch_stdin = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--watch-stdin")) { watch_stdin = 1; continue; }
        if (!strcmp(a, "--no-offload")) { offload = 0; continue; }
        if (!v) { fprintf(stderr, "linkemu: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--tag")) continue; /* only there so cleanup can find us */
        else if (!strcmp(a, "--src-ns")) src_ns = v;
        else if (!strcmp(a, "--dst-ns")) dst_ns = v;
        else if (!strcmp(a, "--dev")) dev = v;
        else if (!strcmp(a, "--ctl")) ctl = v;
        else if (!strcmp(a, "--delay-us")) delay_us = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--rate-bps")) rate = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--rate-bps-rev")) rate_rev = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--queue-bytes")) queue = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--ring-bytes")) ring = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--loss-ppb")) loss = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else { fprintf(stderr, "linkemu: unknown option %s\n", a); return 2; }
    }
    if (!src_ns || !dst_ns || !ctl || !rate || !queue) {
        fprintf(stderr, "linkemu: need --src-ns --dst-ns --ctl --rate-bps --queue-bytes\n");
        return 2;
    }
    if (!rate_rev) rate_rev = rate;
    if (ring < 4 * (uint64_t)MAX_PKT) ring = 4 * (uint64_t)MAX_PKT;
    ring = align8(ring);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int src_fd = open_tun_in(src_ns, dev, offload);
    int dst_fd = src_fd < 0 ? -1 : open_tun_in(dst_ns, dev, offload);
    if (offload && (src_fd < 0 || dst_fd < 0)) {
        /* Both ends must agree on the header, so fall back on both. */
        if (src_fd >= 0) close(src_fd);
        offload = 0;
        src_fd = open_tun_in(src_ns, dev, 0);
        dst_fd = open_tun_in(dst_ns, dev, 0);
    }
    uint64_t rates[2] = {rate, rate_rev};
    const char *names[2] = {"fwd", "rev"};
    for (int i = 0; i < 2; i++) {
        struct direction *d = &dirs[i];
        d->name = names[i];
        d->in_fd = i == 0 ? src_fd : dst_fd;
        d->out_fd = i == 0 ? dst_fd : src_fd;
        atomic_store(&d->p.delay_ns, delay_us * 1000ULL);
        atomic_store(&d->p.rate_bps, rates[i]);
        atomic_store(&d->p.queue_bytes, queue);
        atomic_store(&d->p.loss_ppb, loss > 1000000000ULL ? 1000000000ULL : loss);
        d->rng = (seed ? seed : 1) * 0x9E3779B97F4A7C15ULL + (uint64_t)i + 1; /* never 0 */
        d->ring_size = ring;
        d->ring = malloc(ring);
        if (!d->ring) die("malloc ring");
    }
    pthread_t th[2];
    sigset_t block, old;
    sigfillset(&block);
    pthread_sigmask(SIG_BLOCK, &block, &old); /* signals go to the control thread */
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, pump, &dirs[i]) != 0) die("pthread_create");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* Listening before "ready": the owner may send a command right away. */
    int ctl_fd = listen_control(ctl);
    printf("ready\n");
    fflush(stdout);
    serve_control(ctl_fd, ctl, watch_stdin);
    stopping = 1;
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    return 0;
}
