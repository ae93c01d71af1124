// bench_io.c — `tiertrain bench io`: sequential and random block-sized reads and writes
// through the real store (the files, striping, engine, registered pinned buffers and
// queue depth a training run uses), so the figures are what the NVMe tier can move.
// Prints a table, then as the last line one JSON object:
//   {"bench":"io","engine":…,"seq_read_GBps":…,"seq_write_GBps":…,"rand_read_GBps":…,"rand_write_GBps":…}
// GB/s are 10^9 bytes per second (fio's bw_bytes / 1e9), so bench/io_vs_fio.sh can divide.
//
// Method: the store holds --size bytes (rounded down to --io-block). Each pattern moves
// all of it, one request per block, keeping 2·qd requests queued (so qd are always in
// flight while the submitter refills): seq write (fresh preallocated file, as a run's
// first write-back is), seq read, rand write, rand read (a random permutation of the
// blocks: each exactly once, like fio's random map). Writes go first so reads hit written
// extents, not unwritten ones the filesystem answers with zeros.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "hostmem.h"
#include "io.h"
#include "plan.h" // uses: plan_nvme_free
#include "util.h"
#include "tier.h"

typedef struct {
    const char *name, *key;
    io_op_t op;
    int random;
    double gbps, sec;
} pattern_t;

// Moves every block of the store once; returns 0 or the first failure's -errno with its
// message in msg.
static int run_pattern(nvme_store_t *s, io_ticket_t *t, int64_t *blk, int nt, char *buf, uint64_t block, uint64_t nblocks,
                       const uint64_t *perm, uint32_t *crcs, pattern_t *p, char *msg, size_t msglen) {
    int rc = 0;
    for (int i = 0; i < nt; i++) blk[i] = -1;
    double t0 = now_ms();
    for (uint64_t k = 0; k < nblocks + (uint64_t)nt && rc == 0; k++) {
        int slot = (int)(k % (uint64_t)nt);
        if (blk[slot] >= 0) {
            // Tickets complete out of order; waiting on the oldest keeps 2·qd queued.
            if ((rc = io_ticket_wait(&t[slot])) != 0) { io_ticket_message(&t[slot], msg, msglen); break; }
            if (p->op == IO_WRITE) crcs[blk[slot]] = t[slot].crc;
            blk[slot] = -1;
        }
        if (k >= nblocks) continue;
        uint64_t b = perm ? perm[k] : k;
        char *mem = buf + (uint64_t)slot * block;
        rc = p->op == IO_WRITE ? nvme_store_write(s, &t[slot], b * block, block, mem)
                               : nvme_store_read(s, &t[slot], b * block, block, mem, crcs[b]);
        if (rc) { io_ticket_message(&t[slot], msg, msglen); break; }
        blk[slot] = (int64_t)b;
    }
    for (int i = 0; i < nt; i++) if (blk[i] >= 0) io_ticket_wait(&t[i]); // drain after a failure
    p->sec = (now_ms() - t0) / 1e3;
    p->gbps = rc == 0 && p->sec > 0 ? (double)(nblocks * block) / p->sec / 1e9 : 0;
    return rc;
}

void bench_fill_random(char *buf, uint64_t bytes) {
    uint64_t seed = 0x10b0;
    for (uint64_t i = 0; i < bytes / 8; i++) ((uint64_t *)buf)[i] = splitmix64(&seed);
}

int bench_nvme_open(const config_t *cfg, hostmem_t *hm, uint64_t size, uint64_t block, int qd, nvme_store_t **s,
                    char *err, size_t errlen) {
    struct iovec iov[IO_MAX_BUFS];
    int nreg = hostmem_regions(hm, iov, IO_MAX_BUFS);
    nvme_store_opts_t so;
    tier_nvme_opts(&so, cfg, size);
    so.block = block;
    so.qd = qd;
    so.bufs = iov;
    so.nbufs = nreg < IO_MAX_BUFS ? nreg : IO_MAX_BUFS;
    return nvme_store_init(s, &so, err, errlen);
}

int bench_io(const config_t *cfg) {
    uint64_t block = cfg->io_block ? cfg->io_block : (1u << 20);
    int qd = cfg->nvme_qd > 0 ? cfg->nvme_qd : 32;
    uint64_t size = cfg->bench_size ? cfg->bench_size : (4ull << 30);
    char a[32], b[32], err[1024];
    if (block % IO_ALIGN || block == 0) usage_error("--io-block %" PRIu64 ": must be a multiple of 4 KiB (e.g. 1M)", block);
    uint64_t nblocks = size / block;
    if (nblocks == 0) usage_error("--size %s: smaller than one --io-block (%s)", format_bytes(a, sizeof a, size), format_bytes(b, sizeof b, block));
    size = nblocks * block;
    const uint64_t room = plan_nvme_free(cfg);
    if (room && size > room) // refused before any work, as a run's plan refuses it
        usage_error("--size %s: the NVMe folder %s has %s free (free space there, give a smaller --size, or another "
                    "--nvme-path)", format_bytes(a, sizeof a, size),
                    cfg->nvme_path[0] ? cfg->nvme_path : "(default: $TMPDIR or /tmp)", format_bytes(b, sizeof b, room));

    // Buffers: one block per request slot, from the pinned pool the engine registers.
    int nt = 2 * qd;
    if (cfg->host_budget && (uint64_t)nt * block > cfg->host_budget) // the cap holds for the bench's buffers too
        usage_error("bench io: its buffers need %s (2 x --nvme-qd %d x --io-block %s), over --host-budget %s (raise it, "
                    "or lower --nvme-qd or --io-block)", format_bytes(a, sizeof a, (uint64_t)nt * block), qd,
                    format_bytes(b, sizeof b, block), format_bytes((char[32]){0}, 32, cfg->host_budget));
    hostmem_opts_t ho;
    tier_hostmem_opts(&ho, cfg, (uint64_t)nt * block);
    ho.budget = 0; // the bench's buffers, checked against --host-budget above, are not a run's host tier
    ho.quiet = cfg->quiet; // the init report and the pinning fallback, if any, on stderr
    hostmem_t *hm = NULL;
    int rc = hostmem_init(&hm, &ho, err, sizeof err);
    if (rc) {
        notice("bench io: %s", err);
        return rc == -EINVAL ? 2 : 1;
    }
    char *buf = hostmem_alloc(hm, (uint64_t)nt * block, "bench io buffers", err, sizeof err);
    if (!buf) runtime_error("bench io: %s", err);
    bench_fill_random(buf, (uint64_t)nt * block);
    nvme_store_t *s = NULL;
    if ((rc = bench_nvme_open(cfg, hm, size, block, qd, &s, err, sizeof err)) != 0) {
        notice("%s", err);
        hostmem_free(hm);
        return rc == -EINVAL ? 2 : 1;
    }
    io_info_t info;
    nvme_store_info(s, &info);
    hostmem_info_t hinfo;
    hostmem_info(hm, &hinfo);

    io_ticket_t *t = calloc((size_t)nt, sizeof *t);
    int64_t *blk = calloc((size_t)nt, sizeof *blk);
    uint64_t *perm = malloc(nblocks * sizeof *perm);
    uint32_t *crcs = calloc(nblocks, sizeof *crcs);
    if (!t || !blk || !perm || !crcs) runtime_error("bench io: out of memory for %" PRIu64 " blocks", nblocks);
    for (uint64_t i = 0; i < nblocks; i++) perm[i] = i;
    uint64_t seed = 0x5eed; // the random patterns' order
    for (uint64_t i = nblocks - 1; i > 0; i--) {
        uint64_t j = splitmix64(&seed) % (i + 1), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }

    printf("bench io: engine %s (%s buffers, %s files%s), %d path%s: %s, size %s, block %s, qd %d%s, host buffers %s%s\n",
           info.engine, info.registered_bufs ? "registered" : "unregistered", info.registered_files ? "registered" : "unregistered",
           info.sqpoll ? ", sqpoll" : "", info.npaths, info.npaths > 1 ? "s" : "", cfg->nvme_path[0] ? cfg->nvme_path : "(default)",
           format_bytes(a, sizeof a, size), format_bytes(b, sizeof b, block), qd, info.verify ? ", crc32c verify" : "",
           hinfo.pinned ? "pinned" : "not pinned", hinfo.node >= 0 ? "" : ", no NUMA");
    fflush(stdout);

    pattern_t pats[] = {
        {"seq write", "seq_write_GBps", IO_WRITE, 0, 0, 0},
        {"seq read", "seq_read_GBps", IO_READ, 0, 0, 0},
        {"rand write", "rand_write_GBps", IO_WRITE, 1, 0, 0},
        {"rand read", "rand_read_GBps", IO_READ, 1, 0, 0},
    };
    int npat = (int)(sizeof pats / sizeof pats[0]);
    printf("%-11s %8s %9s %9s %10s\n", "pattern", "GB/s", "MiB/s", "seconds", "requests");
    char msg[1024] = "";
    int failed = 0;
    for (int i = 0; i < npat && !failed; i++) {
        rc = run_pattern(s, t, blk, nt, buf, block, nblocks, pats[i].random ? perm : NULL, crcs, &pats[i], msg, sizeof msg);
        if (rc) { failed = 1; break; }
        printf("%-11s %8.3f %9.0f %9.2f %10" PRIu64 "\n", pats[i].name, pats[i].gbps, pats[i].gbps * 1e9 / 1048576.0,
               pats[i].sec, nblocks);
        fflush(stdout);
    }
    io_stats_t st;
    nvme_store_stats(s, &st);
    if (!failed)
        printf("engine stats: %" PRIu64 " pieces (%" PRIu64 " with registered buffers), %" PRIu64 " retries, %" PRIu64
               " short continuations, %" PRIu64 " errors\n", st.pieces_read + st.pieces_written, st.fixed, st.retries, st.shorts, st.errors);
    nvme_store_free(s);
    hostmem_free(hm);
    free(t);
    free(blk);
    free(perm);
    free(crcs);
    if (failed) {
        notice("bench io: %s", msg);
        return 1;
    }
    printf("{\"bench\":\"io\",\"engine\":\"%s\",\"size_bytes\":%" PRIu64 ",\"block_bytes\":%" PRIu64 ",\"qd\":%d,\"paths\":%d,"
           "\"registered\":%s,\"verify\":%s,\"seq_read_GBps\":%.4f,\"seq_write_GBps\":%.4f,\"rand_read_GBps\":%.4f,\"rand_write_GBps\":%.4f}\n",
           info.engine, size, block, qd, info.npaths, info.registered_bufs ? "true" : "false", info.verify ? "true" : "false",
           pats[1].gbps, pats[0].gbps, pats[3].gbps, pats[2].gbps);
    return 0;
}
