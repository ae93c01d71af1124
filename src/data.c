// data.c — token sources behind data.h: the built-in synthetic corpus (generated in memory
// at open), raw text files (bytes are tokens) and llm.c token files (*.bin: GPT-2's uint16
// tokens or Llama 3's uint32), both mapped read-only. Validates everything on open (header,
// exact size, every token < V, enough tokens for a batch), then splits: the last 5% (at least
// one micro-batch) is held out. Also `tiertrain tokenize`, which writes the llm.c format
// (uint16) atomically. Does not shuffle, sample or know the model beyond V, T and B. Called by
// train/plan, eval and main.
#include "data.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h> // uses: sigaction (the mapping's guard)
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h> // uses: fstatvfs
#include <unistd.h>
#include "util.h" // uses: splitmix64, mallocCheck, notice

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llm.c token files are little-endian; this reader maps them as host uint16/uint32"
#endif

#define LLMC_HEADER_INTS 256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)
#define VAL_PERCENT 5
#define SYNTH_SEED 0x7e57c0de5eedULL   // fixed: the corpus never depends on --seed
#define SYNTH_BYTES (1536u * 1024u)    // 1.5 MiB unless a batch needs more
#define SYNTH_MAX_BYTES (256u << 20)
#define VOCAB_MAX (1u << 24)           // --vocab's bound (cli_table.c)

// llm.c's token files: a header of 256 little-endian int32 (magic, version, token count),
// then the tokens, uint16 in GPT-2's format (what tokenize writes) and uint32 in Llama 3's
// (llm.c dev/data/data_common.py), for vocabularies above 65536 (Llama 3's 128256).
typedef struct {
    int32_t magic, version;
    int width;             // bytes a token
    const char *name, *kind, *fix; // the tokens; the source's kind (data_kind); how to remake a damaged file
} llmc_format_t;
static const llmc_format_t llmc_formats[] = {
    {20240520, 1, 2, "uint16 tokens", "llm.c uint16 tokens", "remake it with tiertrain tokenize"},
    {20240801, 7, 4, "uint32 tokens", "llm.c uint32 tokens", "remake it with the tokenizer that wrote it"},
};

struct data {
    const void *tok;      // (n) the tokens: bytes (synthetic, text), or an llm.c file's uint16 or uint32
    int width;            // bytes a token: 1, 2 or 4
    const char *kind;     // "built-in corpus", "text", "llm.c uint16 tokens", ...
    size_t n;
    size_t start[2], len[2], pos[2]; // per split: first token, tokens, next window
    size_t bt;            // B·T tokens per micro-batch
    void *map;            // the file mapping, when there is one
    size_t map_len;
    uint8_t *owned;       // the synthetic corpus
    char desc[TT_PATH_MAX + 96];
};

static uint32_t token_at(const data_t *d, size_t i) {
    switch (d->width) {
    case 4: return ((const uint32_t *)d->tok)[i];
    case 2: return ((const uint16_t *)d->tok)[i];
    default: return ((const uint8_t *)d->tok)[i];
    }
}

// out[i] = token at + i for i < n (one switch, then the loop: the step's inputs are B·T of these)
static void tokens_copy(const data_t *d, size_t at, size_t n, int *out) {
    switch (d->width) {
    case 4: for (size_t i = 0; i < n; i++) out[i] = (int)((const uint32_t *)d->tok)[at + i]; break;
    case 2: for (size_t i = 0; i < n; i++) out[i] = ((const uint16_t *)d->tok)[at + i]; break;
    default: for (size_t i = 0; i < n; i++) out[i] = ((const uint8_t *)d->tok)[at + i]; break;
    }
}

// ---------------------------------------------------------------- synthetic corpus
// Lines of five kinds, each with structure a small model can learn from context:
//  - sentences from a grammar with number agreement ("The old dogs chase a cat."), words
//    drawn Zipf-like (frequent words are much more frequent, as in real text);
//  - facts about 24 named people that never change ("Grace lives in Oslo.",
//    "Where does grace live? In oslo."), so names predict their attributes;
//  - arithmetic facts ("17+25=42.", "7*8=56.", "61-19=42.");
//  - counting runs ("Count from 13: 13 14 15 16 17.");
//  - spelled-out words ("Spell horse: h-o-r-s-e.").

typedef struct { char *p; size_t len, cap; uint64_t rng; } synth_t;

static uint64_t rnd(synth_t *s, uint64_t n) { return splitmix64(&s->rng) % n; }

static void put(synth_t *s, const char *str) {
    size_t n = strlen(str);
    if (s->len + n > s->cap) n = s->cap - s->len; // the buffer has slack for a whole line
    memcpy(s->p + s->len, str, n);
    s->len += n;
}

static void putf(synth_t *s, const char *fmt, int a, int b, int c) {
    char buf[64];
    snprintf(buf, sizeof buf, fmt, a, b, c);
    put(s, buf);
}

// Index in [0, n) with probability proportional to 1/(i+1): a Zipf-like draw.
static int zipf(synth_t *s, int n) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += 720720 / (uint64_t)(i + 1);
    uint64_t r = rnd(s, total);
    for (int i = 0; i < n; i++) {
        uint64_t w = 720720 / (uint64_t)(i + 1);
        if (r < w) return i;
        r -= w;
    }
    return n - 1;
}

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const nouns[][2] = {
    {"cat", "cats"}, {"dog", "dogs"}, {"bird", "birds"}, {"child", "children"}, {"man", "men"},
    {"woman", "women"}, {"tree", "trees"}, {"house", "houses"}, {"river", "rivers"}, {"king", "kings"},
    {"ship", "ships"}, {"city", "cities"}, {"book", "books"}, {"horse", "horses"}, {"teacher", "teachers"},
    {"farmer", "farmers"}, {"stone", "stones"}, {"apple", "apples"}, {"box", "boxes"}, {"mouse", "mice"},
    {"wolf", "wolves"}, {"baby", "babies"}, {"garden", "gardens"}, {"queen", "queens"}, {"boat", "boats"},
    {"song", "songs"}, {"door", "doors"}, {"road", "roads"}, {"star", "stars"}, {"fish", "fish"},
};
static const char *const tverbs[][2] = { // (third person singular, plural)
    {"sees", "see"}, {"likes", "like"}, {"finds", "find"}, {"chases", "chase"}, {"watches", "watch"},
    {"helps", "help"}, {"carries", "carry"}, {"follows", "follow"}, {"eats", "eat"}, {"builds", "build"},
    {"loves", "love"}, {"pushes", "push"}, {"holds", "hold"}, {"hears", "hear"}, {"wants", "want"},
    {"paints", "paint"},
};
static const char *const iverbs[][2] = {
    {"sleeps", "sleep"}, {"runs", "run"}, {"sings", "sing"}, {"waits", "wait"},
    {"falls", "fall"}, {"swims", "swim"}, {"laughs", "laugh"}, {"grows", "grow"},
};
static const char *const adjs[] = {
    "big", "small", "old", "young", "red", "happy", "quiet", "green",
    "tall", "dark", "bright", "little", "angry", "cold", "brave", "slow",
};
static const char *const places[] = {
    "in the garden", "by the river", "at night", "near the house", "on the road", "under the tree",
};
static const char *const people[] = {
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "nina",
    "oscar", "peggy", "quinn", "rupert", "sybil", "trent", "ursula", "victor", "wendy", "xavier", "yara", "zoe",
};
static const char *const cities[] = {
    "paris", "london", "tokyo", "cairo", "lima", "oslo", "rome", "delhi", "berlin", "sydney", "toronto", "nairobi",
};
static const char *const jobs[] = {
    "baker", "doctor", "pilot", "farmer", "teacher", "painter", "sailor", "writer", "miner", "judge", "singer", "tailor",
};
static const char *const pets[] = {"cat", "dog", "fox", "owl", "horse", "goat", "parrot", "rabbit"};
static const char *const colors[] = {"red", "blue", "green", "yellow", "black", "white", "purple", "orange"};

// Capitalized copy of a word ("oslo" -> "Oslo").
static void put_cap(synth_t *s, const char *w) {
    char buf[32];
    snprintf(buf, sizeof buf, "%s", w);
    if (buf[0] >= 'a' && buf[0] <= 'z') buf[0] = (char)(buf[0] - 'a' + 'A');
    put(s, buf);
}

// "the old dogs" / "an apple"; returns whether the phrase is plural.
static int noun_phrase(synth_t *s, int capital) {
    int plural = rnd(s, 3) == 0;
    static const char *const det_sg[] = {"the", "a", "every", "one"};
    static const char *const det_pl[] = {"the", "some", "two", "many"};
    const char *det = plural ? det_pl[zipf(s, 4)] : det_sg[zipf(s, 4)];
    const char *adj = rnd(s, 2) == 0 ? adjs[zipf(s, COUNT(adjs))] : NULL;
    const char *noun = nouns[zipf(s, COUNT(nouns))][plural];
    const char *next = adj ? adj : noun;
    if (strcmp(det, "a") == 0 && strchr("aeiou", next[0])) det = "an";
    if (capital) put_cap(s, det);
    else put(s, det);
    put(s, " ");
    if (adj) { put(s, adj); put(s, " "); }
    put(s, noun);
    return plural;
}

static void line_grammar(synth_t *s) {
    int plural = noun_phrase(s, 1);
    put(s, " ");
    if (rnd(s, 3) == 0) {
        put(s, iverbs[zipf(s, COUNT(iverbs))][plural]);
        put(s, " ");
        put(s, places[zipf(s, COUNT(places))]);
    } else {
        put(s, tverbs[zipf(s, COUNT(tverbs))][plural]);
        put(s, " ");
        noun_phrase(s, 0);
    }
    put(s, ".\n");
}

static void line_person(synth_t *s) {
    int i = zipf(s, COUNT(people));
    const char *who = people[i];
    const char *city = cities[(i * 5 + 1) % COUNT(cities)];
    const char *job = jobs[(i * 7 + 3) % COUNT(jobs)];
    const char *pet = pets[(i * 3) % COUNT(pets)];
    const char *color = colors[(i * 5 + 2) % COUNT(colors)];
    switch (rnd(s, 6)) {
    case 0: put_cap(s, who); put(s, " lives in "); put_cap(s, city); put(s, ".\n"); break;
    case 1: put_cap(s, who); put(s, " is a "); put(s, job); put(s, ".\n"); break;
    case 2: put_cap(s, who); put(s, strchr("aeiou", color[0]) ? " has an " : " has a "); put(s, color); put(s, " "); put(s, pet); put(s, ".\n"); break;
    case 3: put(s, "Where does "); put_cap(s, who); put(s, " live? In "); put_cap(s, city); put(s, ".\n"); break;
    case 4: put(s, "What does "); put_cap(s, who); put(s, " do? "); put_cap(s, who); put(s, " is a ");
            put(s, job); put(s, ".\n"); break;
    default: put(s, "The "); put(s, job); put(s, " from "); put_cap(s, city); put(s, " is "); put_cap(s, who);
             put(s, ".\n"); break;
    }
}

static void line_arith(synth_t *s) {
    int a, b;
    switch (rnd(s, 3)) {
    case 0: a = (int)rnd(s, 100); b = (int)rnd(s, 100); putf(s, "%d+%d=%d.\n", a, b, a + b); break;
    case 1: a = (int)rnd(s, 100); b = (int)rnd(s, (uint64_t)a + 1); putf(s, "%d-%d=%d.\n", a, b, a - b); break;
    default: a = (int)rnd(s, 13); b = (int)rnd(s, 13); putf(s, "%d*%d=%d.\n", a, b, a * b); break;
    }
}

static void line_count(synth_t *s) {
    int a = (int)rnd(s, 90), n = 4 + (int)rnd(s, 5);
    putf(s, "Count from %d:", a, 0, 0);
    for (int i = 0; i < n; i++) putf(s, " %d", a + i, 0, 0);
    put(s, ".\n");
}

static void line_spell(synth_t *s) {
    const char *w = nouns[zipf(s, COUNT(nouns))][0];
    put(s, "Spell ");
    put(s, w);
    put(s, ":");
    for (const char *c = w; *c; c++) {
        char b[3] = {c == w ? ' ' : '-', *c, 0};
        put(s, b);
    }
    put(s, ".\n");
}

// Exactly `bytes` bytes of corpus; the same prefix for any length (one fixed stream).
static uint8_t *synth_generate(size_t bytes) {
    synth_t s = {.p = mallocCheck(bytes + 256), .len = 0, .cap = bytes + 256, .rng = SYNTH_SEED};
    while (s.len < bytes) {
        uint64_t k = rnd(&s, 100);
        if (k < 45) line_grammar(&s);
        else if (k < 70) line_person(&s);
        else if (k < 85) line_arith(&s);
        else if (k < 93) line_count(&s);
        else line_spell(&s);
    }
    return (uint8_t *)s.p;
}

// ---------------------------------------------------------------- open / split

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int fail(data_t *d, int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int fail(data_t *d, int rc, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    data_free(d);
    return rc;
}

// ---------------------------------------------------------------- the mapping's guard
// The data file is mapped, not read: cut short under a running job (truncated, rewritten in
// place), a read past its new end is a SIGBUS, which killed the run with no word. The handler
// names the file on one line and exits 1; checkpoints are written to temporary names and
// renamed, so none is left half-written. A SIGBUS anywhere else keeps its default action.
#define GUARDS 4 // mappings guarded at once (the run's data, eval's)
static struct {
    const char *lo, *hi; // the mapping; NULL when the slot is free
    char line[TT_PATH_MAX + 160];
    size_t len;
} guard[GUARDS];

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    const char *at = si->si_addr;
    for (int i = 0; i < GUARDS; i++) {
        const char *lo = __atomic_load_n(&guard[i].lo, __ATOMIC_ACQUIRE);
        if (lo && at >= lo && at < guard[i].hi) {
            ssize_t w = write(STDERR_FILENO, guard[i].line, guard[i].len);
            (void)w; // nothing more to do from a handler
            _exit(1);
        }
    }
    // not ours: the default action, taken when the faulting access runs again
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
}

static void guard_add(const void *p, size_t len, const char *path) {
    static int installed;
    if (!installed) {
        struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO};
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, NULL) != 0) return; // unguarded: a SIGBUS ends the run as before
        installed = 1;
    }
    for (int i = 0; i < GUARDS; i++)
        if (!guard[i].lo) {
            int n = snprintf(guard[i].line, sizeof guard[i].line, "tiertrain: --data %s: the file shrank while the run "
                             "read it (keep a data file unchanged while a run uses it)\n", path);
            guard[i].len = n > 0 && (size_t)n < sizeof guard[i].line ? (size_t)n : sizeof guard[i].line - 1;
            guard[i].hi = (const char *)p + len;
            __atomic_store_n(&guard[i].lo, (const char *)p, __ATOMIC_RELEASE);
            return;
        }
}

static void guard_drop(const void *p) {
    for (int i = 0; i < GUARDS; i++)
        if (guard[i].lo == p) __atomic_store_n(&guard[i].lo, NULL, __ATOMIC_RELEASE);
}

// Maps a whole regular file read-only. Returns 0 or -errno (message in err).
static int map_file(data_t *d, const char *path, size_t *size, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK); // (a FIFO must not wait for a writer: refused below)
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "--data %s: %s (accepted: synthetic, a text file, or an llm.c .bin token file)", path,
                 strerror(e));
        return -e;
    }
    struct stat st;
    int frc = fstat(fd, &st);
    if (frc != 0 || !S_ISREG(st.st_mode)) {
        int e = frc != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        close(fd);
        snprintf(err, errlen, "--data %s: not a regular file (accepted: synthetic, a text file, or an llm.c .bin token "
                 "file)", path);
        return -e;
    }
    *size = (size_t)st.st_size;
    if (*size == 0) { close(fd); return 0; }
    void *p = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "--data %s: cannot map %zu bytes: %s", path, *size, strerror(e));
        return -e;
    }
    d->map = p;
    d->map_len = *size;
    guard_add(p, *size, path);
    return 0;
}

int data_open(data_t **out, const config_t *cfg, char *err, size_t errlen) {
    *out = NULL;
    data_t *d = calloc(1, sizeof *d);
    if (!d) { snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    const char *path = cfg->data;
    d->bt = (size_t)cfg->B * (size_t)cfg->T;
    size_t need = d->bt + 1; // one micro-batch window
    d->width = 1;

    if (strcmp(path, "synthetic") == 0) {
        if (cfg->V < 128)
            return fail(d, -EINVAL, err, errlen,
                        "--data synthetic: the corpus is ASCII text and needs --vocab >= 128 (got --vocab %d)", cfg->V);
        // Big enough that the 5% held out holds one micro-batch.
        size_t bytes = SYNTH_BYTES;
        if (need * (100 / VAL_PERCENT) > bytes) bytes = need * (100 / VAL_PERCENT);
        if (bytes > SYNTH_MAX_BYTES)
            return fail(d, -EINVAL, err, errlen, "--data synthetic: --batch %d x --seq %d needs a %zu-byte corpus "
                        "(accepted: at most %u; lower --batch or --seq)", cfg->B, cfg->T, bytes, SYNTH_MAX_BYTES);
        d->owned = synth_generate(bytes);
        d->tok = d->owned;
        d->n = bytes;
        d->kind = "built-in corpus";
    } else if (ends_with(path, ".bin")) {
        size_t size = 0;
        int rc = map_file(d, path, &size, err, errlen);
        if (rc < 0) { data_free(d); return rc; }
        if (size < LLMC_HEADER_BYTES)
            return fail(d, -EINVAL, err, errlen, "--data %s: %zu bytes, too small for an llm.c token file (its header "
                        "alone is %d bytes; give a .bin from tiertrain tokenize)", path, size, LLMC_HEADER_BYTES);
        int32_t h[LLMC_HEADER_INTS];
        memcpy(h, d->map, sizeof h);
        const llmc_format_t *f = NULL;
        for (size_t i = 0; i < sizeof llmc_formats / sizeof *llmc_formats; i++)
            if (h[0] == llmc_formats[i].magic) f = &llmc_formats[i];
        if (!f)
            return fail(d, -EINVAL, err, errlen, "--data %s: bad magic %d, not an llm.c token file (accepted: magic "
                        "20240520 for uint16 tokens, 20240801 for uint32; raw text must not end in .bin)", path, h[0]);
        if (h[1] != f->version)
            return fail(d, -EINVAL, err, errlen, "--data %s: unsupported version %d for magic %d (accepted: %d; %s)",
                        path, h[1], f->magic, f->version, f->fix);
        if (h[2] < 0)
            return fail(d, -EINVAL, err, errlen, "--data %s: negative token count %d in the header (a damaged file: "
                        "%s)", path, h[2], f->fix);
        size_t count = (size_t)h[2], want = LLMC_HEADER_BYTES + (size_t)f->width * count;
        if (size < want)
            return fail(d, -EINVAL, err, errlen, "--data %s: truncated: the header says %zu %s (%zu bytes), the "
                        "file has %zu bytes (a cut-short copy? %s)", path, count, f->name, want, size, f->fix);
        if (size > want)
            return fail(d, -EINVAL, err, errlen, "--data %s: %zu bytes, more than the %zu that the header's %zu %s "
                        "need (trailing data: a damaged file; %s)", path, size, want, count, f->name, f->fix);
        d->tok = (const char *)d->map + LLMC_HEADER_BYTES;
        d->width = f->width;
        d->n = count;
        size_t bad = count;
        uint32_t maxtok = 0;
        for (size_t i = 0; i < count; i++) {
            uint32_t t = token_at(d, i);
            if (t >= (unsigned)cfg->V && bad == count) bad = i;
            if (t > maxtok) maxtok = t;
        }
        // the vocabulary is the checkpoint's or the folder's, no flag's
        if (bad < count && (cfg->command == CMD_EVAL || cfg->resume[0] || cfg->init_from[0]))
            return fail(d, -EINVAL, err, errlen, "--data %s: token %u at index %zu is outside the model's vocabulary of "
                        "%d (the file's largest token is %u: give data tokenized for this model)", path,
                        token_at(d, bad), bad, cfg->V, maxtok);
        if (bad < count && maxtok >= VOCAB_MAX)
            return fail(d, -EINVAL, err, errlen, "--data %s: token %u at index %zu is >= --vocab %d, and the file's "
                        "largest token, %u, is beyond any vocabulary (--vocab is at most %u: a damaged file? %s)",
                        path, token_at(d, bad), bad, cfg->V, maxtok, VOCAB_MAX, f->fix);
        if (bad < count)
            return fail(d, -EINVAL, err, errlen, "--data %s: token %u at index %zu is >= --vocab %d (the file's largest "
                        "token is %u: use --vocab >= %u)", path, token_at(d, bad), bad, cfg->V, maxtok, maxtok + 1u);
        d->kind = f->kind;
    } else {
        size_t size = 0;
        int rc = map_file(d, path, &size, err, errlen);
        if (rc < 0) { data_free(d); return rc; }
        if (cfg->V < 256)
            return fail(d, -EINVAL, err, errlen, "--data %s: a text file's bytes are tokens 0..255, which needs --vocab "
                        ">= 256 (got --vocab %d; or give an llm.c .bin token file)", path, cfg->V);
        d->tok = d->map;
        d->n = size;
        d->kind = "text";
    }

    // Held out: the last 5%, at least one micro-batch window; training needs one too.
    size_t val = d->n / (100 / VAL_PERCENT);
    if (val < need) val = need;
    if (d->n < val + need && cfg->command == CMD_EVAL) // eval asks for its smallest window; it counts its own
        return fail(d, -EINVAL, err, errlen, "--data %s: %zu tokens, too few to evaluate (give a longer file)", path,
                    d->n);
    if (d->n < val + need)
        return fail(d, -EINVAL, err, errlen, "--data %s: %zu tokens are too few for --batch %d x --seq %d (accepted: at "
                    "least %zu tokens: one micro-batch of B*T+1 = %zu to train on and one held out)",
                    path, d->n, cfg->B, cfg->T, 2 * need, need);
    d->start[DATA_TRAIN] = 0;
    d->len[DATA_TRAIN] = d->n - val;
    d->start[DATA_VAL] = d->n - val;
    d->len[DATA_VAL] = val;
    snprintf(d->desc, sizeof d->desc, "%s (%s, %zu tokens: %zu train, %zu held out)", path, d->kind, d->n,
             d->len[DATA_TRAIN], d->len[DATA_VAL]);
    *out = d;
    return 0;
}

void data_next(data_t *d, int split, int *inputs, int *targets) {
    size_t base = d->start[split] + d->pos[split];
    data_window(d, base, d->bt, inputs, targets);
    // Advance by B·T; the next window (B·T+1 tokens) must fit in the split, else wrap.
    d->pos[split] += d->bt;
    if (d->pos[split] + d->bt + 1 > d->len[split]) d->pos[split] = 0;
}

void data_rewind(data_t *d, int split) { d->pos[split] = 0; }

uint64_t data_position(const data_t *d, int split) { return d->pos[split]; }

int data_seek(data_t *d, int split, uint64_t pos) {
    if (pos + d->bt + 1 > d->len[split]) return -EINVAL;
    d->pos[split] = (size_t)pos;
    return 0;
}

void data_window(const data_t *d, size_t at, size_t n, int *inputs, int *targets) {
    tokens_copy(d, at, n, inputs);
    tokens_copy(d, at + 1, n, targets);
}

size_t data_count(const data_t *d) { return d->n; }

const char *data_kind(const data_t *d) { return d->kind; }

size_t data_tokens(const data_t *d, int split) { return d->len[split]; }

const char *data_describe(const data_t *d) { return d->desc; }

void data_free(data_t *d) {
    if (!d) return;
    if (d->map) {
        guard_drop(d->map);
        munmap(d->map, d->map_len);
    }
    free(d->owned);
    free(d);
}

// ---------------------------------------------------------------- tokenize

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int data_tokenize(const char *in_path, const char *out_path) {
    int in = open(in_path, O_RDONLY | O_NONBLOCK); // (a FIFO must not wait for a writer: refused below)
    if (in < 0) {
        notice("tokenize: input %s: %s (accepted: a readable text file)", in_path, strerror(errno));
        return 2;
    }
    struct stat st;
    if (fstat(in, &st) != 0 || S_ISDIR(st.st_mode)) {
        notice("tokenize: input %s: is a directory (accepted: a readable text file)", in_path);
        close(in);
        return 2;
    }
    if (path_same_file(out_path, in_path)) {
        notice("tokenize: -o %s is the input file itself (choose another output)", out_path);
        close(in);
        return 2;
    }
    char tmp[TT_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        notice("tokenize: -o %s: cannot create %s: %s (choose a writable place)", out_path, tmp, strerror(errno));
        close(in);
        return 2;
    }

    // A regular input's output size is known: a disk without room for it is refused up front
    struct statvfs vfs;
    const uint64_t need = LLMC_HEADER_INTS * sizeof(int32_t) + 2 * (uint64_t)st.st_size;
    if (S_ISREG(st.st_mode) && fstatvfs(out, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        char a[32], b[32];
        notice("tokenize: -o %s: needs %s, %s free there (free space, or choose another place)", out_path,
               format_bytes(a, sizeof a, need), format_bytes(b, sizeof b, (uint64_t)vfs.f_bavail * vfs.f_frsize));
        close(out);
        unlink(tmp);
        close(in);
        return 2;
    }
    if (S_ISREG(st.st_mode) && st.st_size > INT32_MAX) { // before writing anything (checked again as it reads)
        notice("tokenize: input %s: %lld bytes, more than %d (accepted: at most 2^31-1 tokens per file; split it)",
               in_path, (long long)st.st_size, INT32_MAX);
        close(out);
        unlink(tmp);
        close(in);
        return 2;
    }

    // Header first (count filled in at the end), then tokens as they are read.
    int32_t header[LLMC_HEADER_INTS] = {llmc_formats[0].magic, llmc_formats[0].version, 0}; // uint16 tokens
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = mallocCheck(CHUNK);
    uint16_t *tok = mallocCheck(CHUNK * sizeof *tok);
    size_t count = 0;
    int rc = write_all(out, header, sizeof header), status = 1, too_many = 0;
    const char *what = "write";
    for (;;) {
        if (rc < 0) break;
        ssize_t r = read(in, buf, CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { rc = -errno; what = "read"; break; }
        if (r == 0) break;
        for (ssize_t i = 0; i < r; i++) tok[i] = buf[i];
        count += (size_t)r;
        if (count > INT32_MAX) { too_many = 1; break; } // (a file grown since the check above)
        rc = write_all(out, tok, (size_t)r * sizeof *tok);
    }
    if (too_many) {
        notice("tokenize: input %s: more than %d bytes (accepted: at most 2^31-1 tokens per file; split it)", in_path,
               INT32_MAX);
        status = 2;
        goto fail;
    }
    if (rc < 0) {
        notice("tokenize: %s %s: %s%s", what, what[0] == 'r' ? in_path : tmp, strerror(-rc),
               rc == -ENOSPC || rc == -EDQUOT ? " (free space there, or choose another place for -o)" : "");
        goto fail;
    }
    if (count == 0) {
        notice("tokenize: input %s is empty (nothing to tokenize)", in_path);
        status = 2;
        goto fail;
    }
    header[2] = (int32_t)count;
    if (pwrite(out, header, sizeof header, 0) != (ssize_t)sizeof header) {
        notice("tokenize: write %s: %s", tmp, strerror(errno ? errno : EIO));
        goto fail;
    }
    if (fsync(out) != 0) { notice("tokenize: fsync %s: %s", tmp, strerror(errno)); goto fail; }
    if (close(out) != 0) { out = -1; notice("tokenize: close %s: %s", tmp, strerror(errno)); goto fail; }
    out = -1;
    if (rename(tmp, out_path) != 0) {
        notice("tokenize: rename %s to %s: %s", tmp, out_path, strerror(errno));
        goto fail;
    }
    // Make the rename itself durable (best effort: the tokens are written and in place).
    char dir[TT_PATH_MAX];
    path_dir(out_path, dir, sizeof dir);
    (void)dir_fsync(dir);
    free(buf);
    free(tok);
    close(in);
    printf("tokenize: %s -> %s: %zu tokens (vocab 256)\n", in_path, out_path, count);
    return 0;

fail:
    free(buf);
    free(tok);
    close(in);
    if (out >= 0) close(out);
    unlink(tmp);
    return status;
}
