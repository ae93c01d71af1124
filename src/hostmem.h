// hostmem.h — the host tier's memory: one pinned, NUMA-local pool reserved at init, from
// which the tier carves its staging buffers and host-resident shard states.
//
// What it does: at init, checks the request against --host-budget and /proc/meminfo
// MemAvailable, maps one region (2 MiB aligned, MADV_HUGEPAGE), binds it to a NUMA node
// (--numa-node N, or auto: the only node on a machine with one; with hwloc the node
// nearest the GPU when one is in use and found, else the node of the calling CPU; bound
// with mbind from libnuma), touches every page once
// with a few threads (first touch of fresh memory is slow on VMs: better now than in
// step 1) and reports how long that took, then pins it with mlock (or the caller's pin
// function, e.g. cudaHostRegister) where RLIMIT_MEMLOCK allows — else it stays unpinned
// with one notice naming `ulimit -l`. hostmem_alloc then hands out 4 KiB-aligned pieces
// of the pool by bumping a pointer: no allocation ever reaches the kernel after init.
//
// What it does not do: free individual allocations (the tier sizes everything at init;
// hostmem_reset drops them all), know about shards, or talk to CUDA itself.
//
// Who calls it: the tier (issue 4), bench/bench_io.c, tests/test_hostmem.c. Its regions
// (hostmem_regions) are what the io engine registers with io_uring.
//
// Errors: init and alloc return an error (-errno / NULL) and write one line without the
// "tiertrain: " prefix into err, naming the budget/limit, the request, and the fix.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct hostmem hostmem_t;

// Pins/unpins [addr, addr+len); returns 0 or -errno. The CUDA backend passes
// cudaHostRegister/cudaHostUnregister wrappers; NULL means mlock/munlock.
typedef int (*hostmem_pin_fn)(void *addr, size_t len, void *arg);

typedef struct {
    uint64_t size;            // pool bytes (rounded up to 4 KiB); 0 = min(budget, ¾·MemAvailable)
    uint64_t budget;          // --host-budget: pool and allocations never exceed it (0 = no cap)
    int numa_node;            // -1 = auto, else the node to bind to
    int pin;                  // pin the pool (mlock or pin_fn)
    int hugepages;            // MADV_HUGEPAGE
    int quiet;                // no notices (the init report and fallbacks)
    const char *gpu_pci;      // auto node: PCI bus id of the GPU in use ("0000:3b:00.0");
                              // NULL = the first NVIDIA GPU hwloc finds, if any
    int cpu_only;             // auto node: no GPU in use (the CPU backend): hwloc is not asked
    hostmem_pin_fn pin_fn, unpin_fn;
    void *pin_arg;
    const char *faults;       // tests: "nomlock" (pinning fails with ENOMEM);
                              // NULL = $TT_HOSTMEM_FAULT
} hostmem_opts_t;

typedef struct {
    uint64_t size, used, peak;
    void *base;
    int node;                 // NUMA node bound to, or -1 (no NUMA support)
    const char *node_why;     // how the node was chosen: "--numa-node", "the only node", "nearest the GPU",
                              // "the calling CPU's"
    int pinned;               // 1 when mlock/pin_fn succeeded
    int hugepages;            // 1 when MADV_HUGEPAGE was accepted
    double touch_ms;          // time to touch every page at init
    int notices;              // fallback notices printed (or suppressed by quiet)
} hostmem_info_t;

// Reserves, binds, touches and pins the pool; prints one notice with the size, node,
// touch time and pinning (unless quiet). Returns 0 and *out, or -errno with one line in
// err: -ENOMEM over --host-budget or MemAvailable, -EINVAL a NUMA node that does not
// exist. Not thread-safe with respect to the same *out.
int hostmem_init(hostmem_t **out, const hostmem_opts_t *o, char *err, size_t errlen);
// Unpins and unmaps everything. NULL-safe. No pointer from the pool may be used after.
void hostmem_free(hostmem_t *h);

// bytes (rounded up to 4 KiB) from the pool, 4096-aligned, never overlapping another
// live allocation. Contents: zero on first use, stale after hostmem_reset. what names the
// request in the error. Returns NULL with one line in err when the pool (or the budget)
// cannot hold it. Thread-safe.
void *hostmem_alloc(hostmem_t *h, uint64_t bytes, const char *what, char *err, size_t errlen);
// Forgets every allocation (the pool itself stays reserved, touched and pinned). Not
// concurrent with hostmem_alloc.
void hostmem_reset(hostmem_t *h);

void hostmem_info(const hostmem_t *h, hostmem_info_t *out); // thread-safe snapshot
// The pool as ≤ 1 GiB pieces (io_uring registers buffers of at most 1 GiB each); writes
// at most max iovecs and returns how many the whole pool needs.
int hostmem_regions(const hostmem_t *h, struct iovec *iov, int max);

// /proc/meminfo MemAvailable in bytes (0 if unreadable). The pool is sized from this,
// not from libnuma's node sizes, which under-report on VMs.
uint64_t hostmem_mem_available(void);
// The NUMA node auto selects (see above), or -1 without NUMA support; why says which
// rule chose it (may be NULL). cpu_only: no GPU in use, so none to be near.
int hostmem_pick_node(const char *gpu_pci, int cpu_only, const char **why);
