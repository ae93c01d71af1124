// hostmem.c — see hostmem.h. One mmap per pool; a mutex-guarded bump pointer.
#include "hostmem.h"
#include <errno.h>
#include <hwloc.h>      // uses: topology with PCI devices, for the node nearest the GPU
#include <numa.h>       // uses: numa_available, numa_max_node, numa_node_of_cpu
#include <numaif.h>     // uses: mbind
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include "util.h"

#define HM_ALIGN 4096u
#define HM_HUGE (2u << 20)
#define HM_REGION_MAX (1ull << 30) // io_uring's per-buffer registration limit
#define HM_TOUCH_THREADS 8
#define ERR(...) (snprintf(err, errlen, __VA_ARGS__))

struct hostmem {
    char *base;          // 2 MiB aligned
    uint64_t size;       // usable bytes (4 KiB multiple)
    uint64_t map_len;    // mapped bytes (2 MiB multiple)
    uint64_t budget;
    int node;
    const char *node_why;
    int pinned, hugepages, quiet;
    double touch_ms;
    hostmem_pin_fn unpin_fn;
    void *pin_arg;
    _Atomic int notices;
    pthread_mutex_t mu;
    uint64_t used, peak; // mu
};

static void hm_notice(hostmem_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hm_notice(hostmem_t *h, const char *fmt, ...) {
    atomic_fetch_add(&h->notices, 1);
    if (h->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vnotice(fmt, ap);
    va_end(ap);
}

// ---------------------------------------------------------------- machine facts

uint64_t hostmem_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

// The NUMA node holding the PCI device (the GPU), via hwloc; -1 when there is none.
static int gpu_node(const char *gpu_pci) {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return -1;
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    // PCI devices come from Linux sysfs; the libpciaccess component adds nothing here and
    // leaks at every load (LeakSanitizer sees it), so leave it out.
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
    int node = -1;
    if (hwloc_topology_load(topo) == 0) {
        hwloc_obj_t dev = NULL;
        unsigned dom = 0, bus = 0, d = 0, fn = 0;
        if (gpu_pci && sscanf(gpu_pci, "%x:%x:%x.%x", &dom, &bus, &d, &fn) == 4) {
            dev = hwloc_get_pcidev_by_busid(topo, dom, bus, d, fn);
        } else {
            while ((dev = hwloc_get_next_pcidev(topo, dev)))
                if (dev->attr->pcidev.vendor_id == 0x10de && (dev->attr->pcidev.class_id >> 8) == 0x03) break;
        }
        hwloc_obj_t anc = dev ? hwloc_get_non_io_ancestor_obj(topo, dev) : NULL;
        if (anc && anc->nodeset && !hwloc_bitmap_iszero(anc->nodeset)) node = hwloc_bitmap_first(anc->nodeset);
    }
    hwloc_topology_destroy(topo);
    return node;
}

int hostmem_pick_node(const char *gpu_pci, int cpu_only, const char **why) {
    if (why) *why = "none (no NUMA support)";
    if (numa_available() < 0) return -1;
    // one node, or no GPU: hwloc's topology is not wanted (loading it dlopens hwloc's
    // plugins, and with them libxml2, ICU and X11, in every process)
    if (numa_max_node() == 0) {
        if (why) *why = "the only node";
        return 0;
    }
    int node = cpu_only ? -1 : gpu_node(gpu_pci);
    if (node >= 0) {
        if (why) *why = "nearest the GPU";
        return node;
    }
    int cpu = sched_getcpu();
    node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
    if (why) *why = "the calling CPU's";
    return node >= 0 ? node : 0;
}

// ---------------------------------------------------------------- touch

typedef struct { char *p; uint64_t n; } touch_arg_t;

static void *touch_range(void *arg) {
    touch_arg_t *a = arg;
    // One write per 4 KiB page faults it in, zero-filled, on the bound node.
    for (uint64_t off = 0; off < a->n; off += HM_ALIGN) ((volatile char *)a->p)[off] = 0;
    return NULL;
}

static void touch_all(char *p, uint64_t n) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cpus > 0 ? (int)cpus : 1;
    if (nt > HM_TOUCH_THREADS) nt = HM_TOUCH_THREADS;
    uint64_t per = ALIGN_UP(CEIL_DIV(n, (uint64_t)nt), (uint64_t)HM_HUGE);
    pthread_t th[HM_TOUCH_THREADS];
    touch_arg_t args[HM_TOUCH_THREADS];
    int started = 0;
    for (int i = 0; i < nt; i++) {
        uint64_t lo = (uint64_t)i * per;
        if (lo >= n) break;
        args[i] = (touch_arg_t){p + lo, n - lo < per ? n - lo : per};
        if (i == nt - 1 || pthread_create(&th[i], NULL, touch_range, &args[i]) != 0) touch_range(&args[i]);
        else started |= 1 << i;
    }
    for (int i = 0; i < nt; i++) if (started & (1 << i)) pthread_join(th[i], NULL);
}

// ---------------------------------------------------------------- init / free

int hostmem_init(hostmem_t **out, const hostmem_opts_t *o, char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = 0;
    char a[32], b[32];
    uint64_t avail = hostmem_mem_available();
    uint64_t size = o->size;
    if (size == 0) {
        size = avail / 4 * 3;
        if (o->budget && o->budget < size) size = o->budget;
        size -= size % HM_ALIGN;
    }
    size = ALIGN_UP(size, (uint64_t)HM_ALIGN);
    if (size == 0) {
        ERR("host pool: size 0 (MemAvailable unreadable and no size given)");
        return -EINVAL;
    }
    if (o->budget && size > o->budget) {
        ERR("--host-budget %s: the host pool needs %s (raise --host-budget, or place fewer states on host)",
            format_bytes(a, sizeof a, o->budget), format_bytes(b, sizeof b, size));
        return -ENOMEM;
    }
    if (avail && size > avail) {
        ERR("host pool: needs %s, MemAvailable is %s (lower --host-budget, place fewer states on host, or free memory)",
            format_bytes(a, sizeof a, size), format_bytes(b, sizeof b, avail));
        return -ENOMEM;
    }
    const char *faults = o->faults ? o->faults : getenv("TT_HOSTMEM_FAULT");
    int nomlock = faults && strstr(faults, "nomlock") != NULL;

    // ---- node
    int node;
    const char *why;
    int numa = numa_available() >= 0;
    if (o->numa_node >= 0) {
        int maxn = numa ? numa_max_node() : 0;
        if (o->numa_node > maxn || (numa && !numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)o->numa_node))) {
            ERR("--numa-node %d: this machine has NUMA nodes 0-%d (use auto or one of them)", o->numa_node, maxn);
            return -EINVAL;
        }
        node = numa ? o->numa_node : -1;
        why = "--numa-node";
    } else {
        node = hostmem_pick_node(o->gpu_pci, o->cpu_only, &why);
    }

    hostmem_t *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    pthread_mutex_init(&h->mu, NULL);
    h->size = size;
    h->budget = o->budget;
    h->node = node;
    h->node_why = why;
    h->quiet = o->quiet;
    h->map_len = ALIGN_UP(size, (uint64_t)HM_HUGE);

    // ---- map, 2 MiB aligned so huge pages can back all of it
    size_t over = h->map_len + HM_HUGE;
    char *raw = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        int e = errno;
        ERR("host pool: mapping %s failed: %s (lower --host-budget or place fewer states on host)",
            format_bytes(a, sizeof a, size), strerror(e));
        pthread_mutex_destroy(&h->mu);
        free(h);
        return -e;
    }
    char *base = (char *)ALIGN_UP((uintptr_t)raw, (uintptr_t)HM_HUGE);
    if (base > raw) munmap(raw, (size_t)(base - raw));
    size_t tail = (size_t)((raw + over) - (base + h->map_len));
    if (tail) munmap(base + h->map_len, tail);
    h->base = base;

    if (o->hugepages) h->hugepages = madvise(base, h->map_len, MADV_HUGEPAGE) == 0;

    // ---- bind before the first touch, so every page is born on the node
    if (node >= 0) {
        unsigned long mask[16] = {0};
        if ((unsigned)node < sizeof mask * 8) {
            mask[node / (8 * sizeof mask[0])] |= 1ul << (node % (8 * sizeof mask[0]));
            if (mbind(base, h->map_len, MPOL_BIND, mask, sizeof mask * 8, 0) != 0)
                hm_notice(h, "host pool: binding to NUMA node %d failed (%s); pages follow the default policy", node, strerror(errno));
        }
    }

    double t0 = now_ms();
    touch_all(base, h->map_len);
    h->touch_ms = now_ms() - t0;

    // ---- pin
    if (o->pin) {
        int rc;
        if (nomlock) rc = -ENOMEM;
        else if (o->pin_fn) rc = o->pin_fn(base, h->map_len, o->pin_arg);
        else rc = mlock(base, h->map_len) == 0 ? 0 : -errno;
        if (rc == 0) {
            h->pinned = 1;
            h->unpin_fn = o->unpin_fn;
            h->pin_arg = o->pin_arg;
        } else {
            char lim[32] = "unlimited";
            struct rlimit rl;
            if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) format_bytes(lim, sizeof lim, rl.rlim_cur);
            hm_notice(h, "host pool: not pinned: locking %s failed (%s; RLIMIT_MEMLOCK is %s); transfers still work but "
                      "may be slower: raise the limit with `ulimit -l unlimited` (or memlock in /etc/security/limits.conf) "
                      "or run with CAP_IPC_LOCK", format_bytes(a, sizeof a, h->map_len), strerror(-rc), lim);
        }
    }
    if (!h->quiet) {
        double gbps = h->touch_ms > 0 ? (double)h->map_len / (h->touch_ms * 1e6) : 0;
        char nodestr[64];
        if (node >= 0) snprintf(nodestr, sizeof nodestr, "NUMA node %d (%s)", node, why);
        else snprintf(nodestr, sizeof nodestr, "no NUMA binding");
        notice("host pool: %s on %s, touched in %.0f ms (%.1f GB/s), %s%s", format_bytes(a, sizeof a, size), nodestr,
               h->touch_ms, gbps, h->pinned ? "pinned" : "not pinned", h->hugepages ? ", huge pages" : "");
    }
    *out = h;
    return 0;
}

void hostmem_free(hostmem_t *h) {
    if (!h) return;
    if (h->pinned) {
        if (h->unpin_fn) h->unpin_fn(h->base, h->map_len, h->pin_arg);
        else munlock(h->base, h->map_len);
    }
    munmap(h->base, h->map_len);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

// ---------------------------------------------------------------- allocation

void *hostmem_alloc(hostmem_t *h, uint64_t bytes, const char *what, char *err, size_t errlen) {
    char a[32], b[32], c[32];
    uint64_t n = ALIGN_UP(bytes ? bytes : 1, (uint64_t)HM_ALIGN);
    if (!what) what = "allocation";
    pthread_mutex_lock(&h->mu);
    uint64_t used = h->used;
    if (n <= h->size - used) {
        h->used = used + n;
        if (h->used > h->peak) h->peak = h->used;
        pthread_mutex_unlock(&h->mu);
        return h->base + used;
    }
    pthread_mutex_unlock(&h->mu);
    if (h->budget)
        ERR("--host-budget %s: '%s' needs %s, but %s of the host pool (%s) is already allocated "
            "(raise --host-budget, or place fewer states on host)", format_bytes(a, sizeof a, h->budget), what,
            format_bytes(b, sizeof b, bytes), format_bytes(c, sizeof c, used), format_bytes((char[32]){0}, 32, h->size));
    else
        ERR("host pool (%s): '%s' needs %s, %s left (the pool is sized at init from the plan; this is a sizing bug "
            "or a --host-budget too small for it)", format_bytes(a, sizeof a, h->size), what,
            format_bytes(b, sizeof b, bytes), format_bytes(c, sizeof c, h->size - used));
    return NULL;
}

void hostmem_reset(hostmem_t *h) {
    pthread_mutex_lock(&h->mu);
    h->used = 0;
    pthread_mutex_unlock(&h->mu);
}

void hostmem_info(const hostmem_t *h, hostmem_info_t *o) {
    hostmem_t *m = (hostmem_t *)h;
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&m->mu);
    o->used = m->used;
    o->peak = m->peak;
    pthread_mutex_unlock(&m->mu);
    o->size = h->size;
    o->base = h->base;
    o->node = h->node;
    o->node_why = h->node_why;
    o->pinned = h->pinned;
    o->hugepages = h->hugepages;
    o->touch_ms = h->touch_ms;
    o->notices = atomic_load(&m->notices);
}

int hostmem_regions(const hostmem_t *h, struct iovec *iov, int max) {
    int n = 0;
    for (uint64_t off = 0; off < h->size; off += HM_REGION_MAX, n++) {
        if (n < max) {
            iov[n].iov_base = h->base + off;
            iov[n].iov_len = (size_t)(h->size - off < HM_REGION_MAX ? h->size - off : HM_REGION_MAX);
        }
    }
    return n;
}
