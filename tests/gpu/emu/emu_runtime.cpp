// emu_runtime.cpp — EMULATION ONLY: the fiber scheduler behind emu_device.h, and the CUDA
// runtime / cuBLASLt entry points tiertrain calls, on the host: one fake device of
// EMU_DEVICE_BYTES (4 GiB) whose "device memory" is host memory.
//
// Streams are queues. A launch, copy, memset or event record is queued on its stream and
// runs only when the host waits (cudaStreamSynchronize, cudaFree) for something that needs
// it; cudaStreamWaitEvent queues a wait for the event's latest record. Waiting runs the
// queued work either lazily (the waited-for stream's own work in order, and of the others
// only what its waits need: work nobody waits for stays queued) or by running the heads of
// all streams in a random order among those whose waits are met, or always the head of
// the highest of a random ranking of the streams ($EMU_SCHED=lazy|random|priority; by
// default a die per wait; $EMU_SEED). So a missing event between streams, a host read
// of device memory before its copy was waited for, or a host buffer reused before its copy
// ran, shows up as wrong data (and a wait that can never be met aborts, naming it). Every entry point takes one lock, so the trainer's
// threads may call in at once. $EMU_EAGER=1 runs each item when queued instead (call order:
// the old behaviour, for telling an ordering bug from a kernel bug).
#include <deque>
#include <map>
#include <mutex>
#include <vector>
#include "emu_device.h"
#include "cublasLt.h"

#define EMU_DEVICE_BYTES ((size_t)4 << 30)
#define EMU_STACK (256 * 1024)

namespace emu {
Thread *g_cur;
dim3 g_block, g_grid, g_bdim;

// Fibers switch with a few instructions (swapcontext would make two signal-mask system
// calls per switch, and the emulation switches millions of times): emu_switch saves the
// System V callee-saved registers on the current stack, parks the stack pointer in *from
// and resumes the stack `to`. x86-64 only.
#if !defined(__x86_64__)
#error "the CUDA emulation's fibers are written for x86-64"
#endif
extern "C" void emu_switch(void **from, void *to);
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch, .-emu_switch\n");

enum { RUN, WAIT_BLOCK, WAIT_WARP, DONE };
static void *sched_sp;
static std::vector<void *> fiber_sp;
static std::vector<char *> stacks;
static std::vector<Thread> threads;
static std::vector<int> state;
static std::vector<uint64_t> slots; // 32 per warp
static std::vector<char> smem_buf; // dyn_smem(): 128-byte aligned inside it
static char *smem_at(size_t *len) {
    const uintptr_t a = ((uintptr_t)smem_buf.data() + 127) & ~(uintptr_t)127;
    if (len) *len = smem_buf.size() - 128;
    return (char *)a;
}
static void (*g_body)(void *);
static void *g_ctx;
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand() { // xorshift64; $EMU_SEED picks another schedule
    static int seeded = 0;
    if (!seeded) {
        seeded = 1;
        const char *e = getenv("EMU_SEED");
        if (e && strtoull(e, NULL, 0)) rng ^= strtoull(e, NULL, 0) * 0xD1B54A32D192ED03ull;
    }
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

static void fiber_entry() {
    const int t = (int)(g_cur - threads.data());
    g_body(g_ctx);
    state[t] = DONE;
    emu_switch(&fiber_sp[t], sched_sp);
    abort(); // a finished fiber is never resumed
}

static void yield_as(int st) {
    int t = (int)(g_cur - threads.data());
    state[t] = st;
    emu_switch(&fiber_sp[t], sched_sp);
}

// A fresh fiber's stack: six zero "saved registers" for emu_switch to pop, then
// fiber_entry as the return address, placed so that fiber_entry starts with the stack
// aligned as after a call (rsp ≡ 8 mod 16).
static void *fresh_stack(char *base) {
    uintptr_t top = ((uintptr_t)base + EMU_STACK) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;                   // fiber_entry's own (never used) return address
    *--sp = (void *)fiber_entry;    // where emu_switch's ret goes
    for (int i = 0; i < 6; i++) *--sp = NULL; // rbp rbx r12 r13 r14 r15
    return sp;
}
void block_barrier() { yield_as(WAIT_BLOCK); }
void warp_barrier() { yield_as(WAIT_WARP); }
uint64_t *warp_slots() { return slots.data() + 32 * (size_t)g_cur->warp; }
void *dyn_smem() { return smem_at(NULL); }

static void die(const char *msg) {
    fprintf(stderr, "emu: %s (block %u,%u,%u of %u,%u,%u, %u threads)\n", msg, g_block.x, g_block.y, g_block.z, g_grid.x,
            g_grid.y, g_grid.z, g_bdim.x);
    abort();
}

static void run_block(int nt, size_t smem) {
    size_t len;
    char *sm = smem_at(&len);
    memset(sm, 0xFF, len);
    for (int t = 0; t < nt; t++) {
        fiber_sp[t] = fresh_stack(stacks[t]);
        state[t] = RUN;
    }
    (void)smem;
    const int nw = (nt + 31) / 32;
    std::vector<int> order(nt);
    for (;;) {
        // run every runnable fiber once, in a shuffled order
        int n = 0;
        for (int t = 0; t < nt; t++)
            if (state[t] == RUN) order[n++] = t;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(next_rand() % (uint64_t)(i + 1));
            int x = order[i]; order[i] = order[j]; order[j] = x;
        }
        for (int i = 0; i < n; i++) {
            int t = order[i];
            g_cur = &threads[t];
            emu_switch(&sched_sp, fiber_sp[t]);
        }
        // release barriers: warps first, then the block
        int live = 0, released = 0;
        for (int t = 0; t < nt; t++) live += state[t] != DONE;
        if (live == 0) return;
        for (int w = 0; w < nw; w++) {
            int wait = 0, other = 0;
            for (int t = w * 32; t < nt && t < w * 32 + 32; t++) {
                if (state[t] == WAIT_WARP) wait++;
                else if (state[t] != DONE) other++;
            }
            if (wait && !other) {
                for (int t = w * 32; t < nt && t < w * 32 + 32; t++)
                    if (state[t] == WAIT_WARP) state[t] = RUN;
                released++;
            }
        }
        if (released) continue;
        int wb = 0;
        for (int t = 0; t < nt; t++) wb += state[t] == WAIT_BLOCK;
        if (wb == live) {
            for (int t = 0; t < nt; t++)
                if (state[t] == WAIT_BLOCK) state[t] = RUN;
            continue;
        }
        die("barrier deadlock: threads wait at different barriers");
    }
}

void run_grid(dim3 g, dim3 b, size_t smem, void (*body)(void *), void *ctx) {
    const int nt = (int)(b.x * b.y * b.z);
    if (nt <= 0 || nt > 1024 || b.y != 1 || b.z != 1) die("unsupported block shape");
    if (g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535) die("bad grid");
    if (smem > 232448) die("more dynamic shared memory than an H100/H200 block may have");
    while ((int)stacks.size() < nt) stacks.push_back((char *)malloc(EMU_STACK));
    fiber_sp.resize(nt);
    threads.resize(nt);
    state.resize(nt);
    slots.assign(32 * (size_t)((nt + 31) / 32), 0);
    smem_buf.assign((smem ? smem : 1) + 128, 0);
    for (int t = 0; t < nt; t++) threads[t] = Thread{dim3((unsigned)t, 0, 0), t % 32, t / 32};
    g_body = body;
    g_ctx = ctx;
    g_grid = g;
    g_bdim = b;
    const size_t nb = (size_t)g.x * g.y * g.z;
    std::vector<size_t> border(nb);
    for (size_t i = 0; i < nb; i++) border[i] = i;
    for (size_t i = nb; i > 1; i--) {
        size_t j = next_rand() % i;
        size_t x = border[i - 1]; border[i - 1] = border[j]; border[j] = x;
    }
    for (size_t i = 0; i < nb; i++) {
        size_t id = border[i];
        g_block = dim3((unsigned)(id % g.x), (unsigned)((id / g.x) % g.y), (unsigned)(id / ((size_t)g.x * g.y)));
        run_block(nt, smem);
    }
    g_cur = NULL;
}
} // namespace emu

// ---------------------------------------------------------------- streams and events
namespace emu {
struct Item {
    enum Kind { FN, RECORD, WAIT } kind;
    std::function<void()> fn; // FN
    intptr_t ev;              // RECORD, WAIT
    uint64_t seq;             // RECORD: this record's number; WAIT: the record waited for
};
struct Event {
    uint64_t recorded = 0, completed = 0;
    std::map<uint64_t, intptr_t> stream_of; // record number -> the stream it was queued on
};
static std::recursive_mutex g_mu;
static std::map<intptr_t, std::deque<Item>> g_queues; // by stream handle; 0 = the legacy stream
static std::map<intptr_t, Event> g_events;

static bool eager() {
    static int e = -1;
    if (e < 0) {
        const char *v = getenv("EMU_EAGER");
        e = v && *v && strcmp(v, "0") != 0;
    }
    return e;
}

static bool runnable(const Item &it) { return it.kind != Item::WAIT || g_events[it.ev].completed >= it.seq; }

static void run_item(std::deque<Item> &q) {
    Item it = std::move(q.front());
    q.pop_front();
    if (it.kind == Item::FN) it.fn();
    else if (it.kind == Item::RECORD && it.seq > g_events[it.ev].completed) g_events[it.ev].completed = it.seq;
}

// Lazily: runs stream sid's own work in order until done() holds, and of the other streams
// only what its waits need (recursively). Work no wait needs stays queued as long as
// possible: an op that should have waited for a copy runs before it.
static void run_lazy(intptr_t sid, const std::function<bool()> &done, const char *what, int depth) {
    if (depth > 64) {
        fprintf(stderr, "emu: %s can never finish: the streams' event waits form a cycle\n", what);
        abort();
    }
    std::deque<Item> &q = g_queues[sid];
    while (!done()) {
        if (q.empty()) {
            fprintf(stderr, "emu: %s can never finish: it waits for an event record that is never queued\n", what);
            abort();
        }
        const Item &h = q.front();
        if (h.kind == Item::WAIT && g_events[h.ev].completed < h.seq) {
            const intptr_t ev = h.ev;
            const uint64_t seq = h.seq;
            run_lazy(g_events[ev].stream_of[seq], [&] { return g_events[ev].completed >= seq; }, what, depth + 1);
            continue;
        }
        run_item(q);
    }
}

// How a wait runs the queues: lazily (above); at random (each step a random runnable head);
// or by priority (a random ranking of the streams per wait; always the highest-ranked
// runnable head: one stream races ahead of the others, e.g. ops before a copy queued
// earlier that nothing forced yet). $EMU_SCHED=lazy|random|priority, else a die per wait.
enum { SCHED_RANDOM = 0, SCHED_LAZY, SCHED_PRIORITY };
static int sched_now() {
    static int mode = -2; // -1: mixed
    if (mode == -2) {
        const char *v = getenv("EMU_SCHED");
        mode = !v ? -1 : !strcmp(v, "lazy") ? SCHED_LAZY : !strcmp(v, "random") ? SCHED_RANDOM
             : !strcmp(v, "priority") ? SCHED_PRIORITY : -1;
    }
    return mode >= 0 ? mode : (int)(next_rand() % 3);
}

// Runs queued work, one stream head at a time among the runnable ones (at random, or by a
// random ranking of the streams), until done() holds.
template <class Done> static void drain(Done done, const char *what, bool by_priority = false) {
    std::map<intptr_t, uint64_t> rank;
    for (auto &kv : g_queues) rank[kv.first] = next_rand();
    while (!done()) {
        std::vector<std::deque<Item> *> ready;
        std::deque<Item> *best = NULL;
        uint64_t best_rank = 0;
        for (auto &kv : g_queues)
            if (!kv.second.empty() && runnable(kv.second.front())) {
                ready.push_back(&kv.second);
                if (!best || rank[kv.first] > best_rank) { best = &kv.second; best_rank = rank[kv.first]; }
            }
        if (ready.empty()) {
            fprintf(stderr, "emu: %s can never finish: every stream with queued work waits for an event record that is "
                            "never reached\n", what);
            abort();
        }
        run_item(by_priority ? *best : *ready[next_rand() % ready.size()]);
    }
}

// Waits until stream sid's queue is empty.
static void sync_stream(intptr_t sid, const char *what) {
    std::deque<Item> &q = g_queues[sid];
    int m = sched_now();
    if (m == SCHED_LAZY) run_lazy(sid, [&] { return q.empty(); }, what, 0);
    else drain([&] { return q.empty(); }, what, m == SCHED_PRIORITY);
}

static bool all_idle() {
    for (auto &kv : g_queues)
        if (!kv.second.empty()) return false;
    return true;
}

static void enqueue(cudaStream_t s, Item it) {
    std::deque<Item> &q = g_queues[(intptr_t)s];
    q.push_back(std::move(it));
    if (eager()) drain([&] { return q.empty(); }, "an eager launch");
}

void enqueue_kernel(cudaStream_t s, std::function<void()> launch) {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    enqueue(s, Item{Item::FN, std::move(launch), 0, 0});
}
} // namespace emu

// ---------------------------------------------------------------- CUDA runtime on the host
static size_t g_used; // "device" bytes handed out by cudaMalloc
struct Alloc { void *p; size_t n; };
static std::vector<Alloc> g_allocs;

extern "C" {
cudaError_t cudaGetDeviceCount(int *count) { *count = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetDevice(int *dev) { *dev = 0; return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) {
    if (g_used + n > EMU_DEVICE_BYTES) return cudaErrorMemoryAllocation;
    void *q = NULL;
    if (posix_memalign(&q, 256, n ? n : 1) != 0) return cudaErrorMemoryAllocation;
    g_allocs.push_back(Alloc{q, n});
    g_used += n;
    *p = q;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    if (!p) return cudaSuccess;
    emu::drain(emu::all_idle, "cudaFree"); // like the real one: after all queued work
    for (size_t i = 0; i < g_allocs.size(); i++)
        if (g_allocs[i].p == p) {
            g_used -= g_allocs[i].n;
            free(p);
            g_allocs.erase(g_allocs.begin() + (long)i);
            return cudaSuccess;
        }
    return cudaErrorInvalidValue;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *free_b = EMU_DEVICE_BYTES - g_used;
    *total_b = EMU_DEVICE_BYTES;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev) {
    (void)dev;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "emulated device");
    p->totalGlobalMem = EMU_DEVICE_BYTES;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int dev) {
    (void)dev;
    *v = a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 232448 : 0;
    return cudaSuccess;
}
static int g_objs;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    (void)f;
    *s = (cudaStream_t)(intptr_t)(++g_objs);
    emu::g_queues[(intptr_t)*s];
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    emu::sync_stream((intptr_t)s, "cudaStreamDestroy");
    emu::g_queues.erase((intptr_t)s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    emu::sync_stream((intptr_t)s, "cudaStreamSynchronize");
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    (void)f;
    uint64_t seq = emu::g_events[(intptr_t)e].recorded;
    if (seq) emu::enqueue(s, emu::Item{emu::Item::WAIT, {}, (intptr_t)e, seq}); // never recorded: nothing to wait for
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    (void)f;
    *e = (cudaEvent_t)(intptr_t)(++g_objs);
    emu::g_events[(intptr_t)*e];
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    emu::Event &ev = emu::g_events[(intptr_t)e];
    if (ev.recorded) emu::run_lazy(ev.stream_of[ev.recorded], [&] { return ev.completed >= ev.recorded; }, "cudaEventSynchronize", 0);
    return cudaSuccess;
}
// The emulation has no clock worth reporting: every interval is 1 ms.
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    (void)start; (void)end;
    *ms = 1.0f;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    emu::Event &ev = emu::g_events[(intptr_t)e];
    uint64_t seq = ++ev.recorded;
    ev.stream_of[seq] = (intptr_t)s;
    emu::enqueue(s, emu::Item{emu::Item::RECORD, {}, (intptr_t)e, seq});
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    (void)k;
    emu::enqueue(s, emu::Item{emu::Item::FN, [=] { memmove(dst, src, n); }, 0, 0});
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(emu::g_mu);
    emu::enqueue(s, emu::Item{emu::Item::FN, [=] { memset(p, v, n); }, 0, 0});
    return cudaSuccess;
}
cudaError_t cudaHostRegister(void *p, size_t n, unsigned f) { (void)p; (void)n; (void)f; return cudaSuccess; }
cudaError_t cudaHostUnregister(void *p) { (void)p; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated"; }
cudaError_t cudaFuncSetAttribute(const void *f, enum cudaFuncAttribute a, int v) { (void)f; (void)a; (void)v; return cudaSuccess; }
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *f) {
    (void)f;
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

// ---------------------------------------------------------------- cuBLASLt: no algorithms
static int g_dummy;
const char *cublasLtGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "not supported"; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = (cublasLtHandle_t)&g_dummy; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { (void)h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s) {
    (void)c; (void)s; *d = (cublasLtMatmulDesc_t)&g_dummy; return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { (void)d; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
    (void)d; (void)a; (void)v; (void)n; return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t r, uint64_t c, int64_t ld) {
    (void)t;
    if (ld < (int64_t)r || c == 0) { fprintf(stderr, "emu: layout %llu x %llu with ld %lld\n", (unsigned long long)r, (unsigned long long)c, (long long)ld); abort(); }
    *l = (cublasLtMatrixLayout_t)&g_dummy;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { (void)l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = (cublasLtMatmulPreference_t)&g_dummy; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { (void)p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t n) {
    (void)p; (void)a; (void)v; (void)n; return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                              cublasLtMatmulPreference_t p, int req, cublasLtMatmulHeuristicResult_t r[], int *n) {
    (void)h; (void)d; (void)a; (void)b; (void)c; (void)dd; (void)p; (void)req; (void)r;
    *n = 0;
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t la,
                              const void *B, cublasLtMatrixLayout_t lb, const void *beta, const void *C, cublasLtMatrixLayout_t lc,
                              void *D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsn, void *stream) {
    (void)h; (void)d; (void)alpha; (void)A; (void)la; (void)B; (void)lb; (void)beta; (void)C; (void)lc; (void)D; (void)ld;
    (void)algo; (void)ws; (void)wsn; (void)stream;
    abort(); // never: the heuristic offers nothing
}
} // extern "C"
