// cli.c — parsing the command line by the flag table (cli_table.c; help and the README's
// flag reference come from the same table, cli_help.c).
// Order of resolution: table defaults, then the --model preset, then every other flag in
// argv order (so `--dim 512 --model tiny` keeps dim 512). Every bad input is one line on
// stderr through usage_error() (exit 2) before any work; --help and --version exit 0.
// Checks files only as far as "exists and can be opened": data.c validates contents.
// Called by main.c (cli_parse); tests walk the table.
#include "cli.h"
#include "cli_table.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h> // uses: statvfs (no_storage)
#include <unistd.h>
#include "checkpoint.h" // uses: checkpoint_resolve, checkpoint_info (--resume's model)
#include "comm.h"  // uses: the world (--init-from is read by rank 0)
#include "hf.h"    // uses: hf_read_config
#include "model.h" // uses: model_preset, model_preset_names
#include "tier.h"  // uses: tier_update_backward_refusal
#include "util.h"  // uses: usage_error, parse_size, format_bytes

#ifndef TT_VERSION
#define TT_VERSION "0.0.0"
#endif


static void *field(config_t *cfg, const flag_t *f) { return (char *)cfg + f->off; }

// ---------------------------------------------------------------- values

// Parses val into f's field. Returns 0, or -1 with one line (no prefix) in err.
static int set_value(const flag_t *f, const char *disp, const char *val, config_t *cfg, int is_default,
                     char *err, size_t errlen) {
    char acc[256];
    cli_accepted(f, acc, sizeof acc, 1);
    char *end = NULL;
    switch (f->kind) {
    case FK_INT: {
        int v;
        if (f->values && strcmp(val, f->values) == 0) {
            v = f->word_val;
        } else {
            errno = 0;
            long long x = strtoll(val, &end, 10);
            if (end == val || *end || !*val) {
                snprintf(err, errlen, "%s %s: not an integer (accepted: %s)", disp, val, acc);
                return -1;
            }
            if (errno == ERANGE || (double)x < f->lo || (double)x > f->hi) {
                snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
                return -1;
            }
            v = (int)x;
        }
        memcpy(field(cfg, f), &v, sizeof v);
        return 0;
    }
    case FK_U64: {
        const char *p = val;
        while (*p == ' ') p++;
        errno = 0;
        unsigned long long x = strtoull(p, &end, 10);
        if (*p < '0' || *p > '9' || end == p || *end) {
            snprintf(err, errlen, "%s %s: not a non-negative integer (accepted: %s)", disp, val, acc);
            return -1;
        }
        if (errno == ERANGE) {
            snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
            return -1;
        }
        uint64_t v = x;
        memcpy(field(cfg, f), &v, sizeof v);
        return 0;
    }
    case FK_SIZE: {
        uint64_t v = 0;
        if (!(f->values && strcmp(val, f->values) == 0)) {
            int rc = parse_size(val, &v);
            if (rc == -ERANGE || rc == -EDOM) {
                snprintf(err, errlen, "%s %s: %s (accepted: %s)", disp, val,
                         rc == -EDOM ? "rounds to 0 bytes" : "out of range", acc);
                return -1;
            }
            if (rc < 0) {
                snprintf(err, errlen, "%s %s: not a size (accepted: %s)", disp, val, acc);
                return -1;
            }
            if ((double)v < f->lo || (double)v > f->hi || (f->align > 1 && v % f->align)) {
                snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
                return -1;
            }
        }
        memcpy(field(cfg, f), &v, sizeof v);
        return 0;
    }
    case FK_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        const int overflow = errno == ERANGE && isinf(v); // 1e999: a number, beyond a double
        if (end == val || *end || !*val || (!isfinite(v) && !overflow)) {
            snprintf(err, errlen, "%s %s: not a number (accepted: %s)", disp, val, acc);
            return -1;
        }
        if (overflow || v < f->lo || v > f->hi || (f->lo_open && v == f->lo) || (f->hi_open && v == f->hi)) {
            snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
            return -1;
        }
        memcpy(field(cfg, f), &v, sizeof v);
        return 0;
    }
    case FK_ENUM: {
        int idx = 0;
        size_t lv = strlen(val);
        for (const char *p = f->values; *p; idx++) {
            size_t n = strcspn(p, "|");
            if (n == lv && n > 0 && strncmp(p, val, n) == 0) {
                memcpy(field(cfg, f), &idx, sizeof idx);
                return 0;
            }
            p += n;
            if (*p == '|') p++;
        }
        snprintf(err, errlen, "%s %s: not accepted (accepted: %s)", disp, val, acc);
        return -1;
    }
    case FK_PRESET:
        if (model_preset(val, cfg) != 0) {
            snprintf(err, errlen, "%s %s: unknown preset (accepted: %s)", disp, val, acc);
            return -1;
        }
        return 0;
    case FK_STRING: {
        size_t n = strlen(val);
        if (n == 0 && !is_default) {
            snprintf(err, errlen, "%s: empty value (accepted: %s)", disp, acc);
            return -1;
        }
        if (n >= f->fsize) {
            snprintf(err, errlen, "%s %.60s...: too long (%zu bytes; accepted: at most %zu)", disp, val, n,
                     f->fsize - 1);
            return -1;
        }
        memcpy(field(cfg, f), val, n + 1);
        return 0;
    }
    case FK_SWITCH: {
        int one = 1;
        memcpy(field(cfg, f), &one, sizeof one);
        return 0;
    }
    default: return 0;
    }
}

// Table defaults (everything but the model shape, which the preset sets).
static void apply_defaults(config_t *cfg) {
    char err[512];
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < CLI_NFLAGS; i++) {
        const flag_t *f = &cli_flags[i];
        if (!f->def) continue;
        char disp[64];
        cli_display_name(f, 0, disp, sizeof disp);
        if (set_value(f, disp, f->def, cfg, 1, err, sizeof err) != 0) {
            fprintf(stderr, "tiertrain: %s:%d: bad default in the flag table: %s\n", __FILE__, __LINE__, err);
            abort();
        }
    }
}

int cli_table_check(char *err, size_t errlen) {
    for (int i = 0; i < CLI_NFLAGS; i++) {
        const flag_t *f = &cli_flags[i];
        size_t want = 0;
        switch (f->kind) {
        case FK_INT: case FK_ENUM: case FK_SWITCH: want = sizeof(int); break;
        case FK_U64: case FK_SIZE: want = sizeof(uint64_t); break;
        case FK_DOUBLE: want = sizeof(double); break;
        case FK_PRESET: case FK_STRING: want = f->fsize > 1 ? f->fsize : 2; break;
        default: want = f->fsize; break; // actions have no field
        }
        if (f->fsize != want) {
            snprintf(err, errlen, "--%s: field of %zu bytes does not match its kind (%zu)", f->name, f->fsize, want);
            return -1;
        }
        int has_value = f->kind != FK_SWITCH && f->kind != FK_HELP && f->kind != FK_VERSION && f->kind != FK_MARKDOWN;
        if (has_value != (f->metavar != NULL)) {
            snprintf(err, errlen, "--%s: metavar %s but the kind %s a value", f->name, f->metavar ? "set" : "missing",
                     has_value ? "takes" : "takes no");
            return -1;
        }
        if (!f->help || !*f->help || f->group >= G_COUNT) {
            snprintf(err, errlen, "--%s: no help text or group", f->name);
            return -1;
        }
        if ((f->kind == FK_INT || f->kind == FK_DOUBLE || f->kind == FK_SIZE) && !(f->lo <= f->hi)) {
            snprintf(err, errlen, "--%s: empty range", f->name);
            return -1;
        }
        if (f->kind == FK_ENUM && !f->values) {
            snprintf(err, errlen, "--%s: enum without values", f->name);
            return -1;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(cli_flags[j].name, f->name) == 0 || (f->short_name && cli_flags[j].short_name == f->short_name)) {
                snprintf(err, errlen, "--%s: defined twice", f->name);
                return -1;
            }
        }
        if (f->def) {
            config_t tmp;
            memset(&tmp, 0, sizeof tmp);
            char e[512];
            if (set_value(f, f->name, f->def, &tmp, 1, e, sizeof e) != 0) {
                snprintf(err, errlen, "--%s: default does not parse: %s", f->name, e);
                return -1;
            }
        }
    }
    return 0;
}

// ---------------------------------------------------------------- parsing

typedef struct {
    const char *positional[1]; // bench NAME / tokenize IN
    int npositional;
    const char *preset;        // the last --model value
    unsigned char seen[CLI_NFLAGS];
} parsed_t;

static int flag_index(const flag_t *f) { return (int)(f - cli_flags); }

static const flag_t *find_long(const char *name, size_t n) {
    for (int i = 0; i < CLI_NFLAGS; i++)
        if (strlen(cli_flags[i].name) == n && strncmp(cli_flags[i].name, name, n) == 0) return &cli_flags[i];
    return NULL;
}

static const flag_t *find_short(char c) {
    for (int i = 0; i < CLI_NFLAGS; i++)
        if (c && cli_flags[i].short_name == c) return &cli_flags[i];
    return NULL;
}

static int takes_value(const flag_t *f) { return f->metavar != NULL; }

static void unknown_flag(const char *arg, size_t n, const command_info_t *ci) __attribute__((noreturn));
static void unknown_flag(const char *arg, size_t n, const command_info_t *ci) {
    const char *names[CLI_NFLAGS];
    size_t count = 0;
    for (int i = 0; i < CLI_NFLAGS; i++)
        if (!cli_flags[i].hidden && (!ci || !cli_flags[i].cmds || (cli_flags[i].cmds & ci->bit))) names[count++] = cli_flags[i].name;
    char given[64];
    const char *p = arg;
    while (*p == '-' && (size_t)(p - arg) < n) p++;
    snprintf(given, sizeof given, "%.*s", (int)(n - (size_t)(p - arg)), p);
    const char *s = cli_closest(given, names, count);
    const char *cmd = ci ? ci->name : "";
    if (s)
        usage_error("%.*s: unknown flag for 'tiertrain%s%s' (did you mean --%s? see tiertrain%s%s --help)", (int)n, arg,
                    ci ? " " : "", cmd, s, ci ? " " : "", cmd);
    usage_error("%.*s: unknown flag for 'tiertrain%s%s' (see tiertrain%s%s --help for the accepted flags)", (int)n, arg,
                ci ? " " : "", cmd, ci ? " " : "", cmd);
}

static void positional(const char *arg, const command_info_t *ci, parsed_t *ps) {
    if (ci->cmd == CMD_TRAIN || ci->cmd == CMD_PLAN || ci->cmd == CMD_EVAL)
        usage_error("unexpected argument '%s' for 'tiertrain %s' (it takes flags only; see tiertrain %s --help)", arg,
                    ci->name, ci->name);
    if (ps->npositional >= 1) {
        if (ci->cmd == CMD_BENCH)
            usage_error("bench %s: unexpected second argument '%s' (one benchmark per run; accepted: %s)",
                        ps->positional[0], arg, BENCH_ACCEPTED);
        usage_error("%s %s: unexpected second argument '%s' (usage: %s)", ci->name, ps->positional[0], arg, ci->usage);
    }
    if (ci->cmd == CMD_BENCH) {
        size_t nb = sizeof cli_bench_names / sizeof cli_bench_names[0];
        int ok = 0;
        for (size_t i = 0; i < nb; i++) ok |= strcmp(arg, cli_bench_names[i]) == 0;
        if (!ok) {
            const char *s = cli_closest(arg, cli_bench_names, nb);
            if (s) usage_error("bench %s: unknown benchmark (did you mean %s? accepted: %s)", arg, s, BENCH_ACCEPTED);
            usage_error("bench %s: unknown benchmark (accepted: %s)", arg, BENCH_ACCEPTED);
        }
    }
    ps->positional[ps->npositional++] = arg;
}

// One pass over argv[2..]. The first pass validates every flag in argv order (applying
// --model where it appears); the final pass runs on a config that already holds the
// preset and skips --model, so explicit shape flags win wherever they are.
static void walk(int argc, char **argv, const command_info_t *ci, config_t *cfg, parsed_t *ps, int final_pass) {
    char err[1024];
    int flags_done = 0;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (flags_done || arg[0] != '-' || arg[1] == 0) {
            if (!final_pass) positional(arg, ci, ps);
            continue;
        }
        if (strcmp(arg, "--") == 0) { flags_done = 1; continue; }
        const flag_t *f = NULL;
        const char *val = NULL;
        int used_short = 0;
        size_t n; // length of the flag part of arg, without "=value"
        if (arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            n = eq ? (size_t)(eq - arg) : strlen(arg);
            f = find_long(arg + 2, n - 2);
            if (eq) val = eq + 1;
        } else {
            const char *eq = strchr(arg + 1, '=');
            n = eq ? (size_t)(eq - arg) : strlen(arg);
            if (n == 2) { f = find_short(arg[1]); used_short = 1; }
            if (eq) val = eq + 1;
        }
        if (!f || f->hidden) unknown_flag(arg, n, ci);
        char disp[64];
        cli_display_name(f, used_short, disp, sizeof disp);
        if (f->cmds && !(f->cmds & ci->bit)) {
            char c[64];
            cli_commands_text(f->cmds, c, sizeof c);
            usage_error("%s: not accepted by 'tiertrain %s' (it is a flag of: %s; see tiertrain %s --help)", disp,
                        ci->name, c, ci->name);
        }
        if (!takes_value(f)) {
            if (val) usage_error("%s=%s: %s takes no value (accepted: %s alone)", disp, val, disp, disp);
            if (f->kind == FK_SWITCH) set_value(f, disp, "", cfg, 0, err, sizeof err);
            ps->seen[flag_index(f)] = 1;
            continue; // actions were handled before parsing
        }
        if (!val) {
            char acc[256];
            cli_accepted(f, acc, sizeof acc, 1);
            if (i + 1 >= argc) usage_error("%s: missing value (accepted: %s)", disp, acc);
            if (strncmp(argv[i + 1], "--", 2) == 0)
                usage_error("%s: missing value before %s (accepted: %s)", disp, argv[i + 1], acc);
            val = argv[++i];
        }
        ps->seen[flag_index(f)] = 1;
        if (f->kind == FK_PRESET) {
            if (final_pass) continue;
            ps->preset = val;
        }
        if (set_value(f, disp, val, cfg, 0, err, sizeof err) != 0) usage_error("%s", err);
    }
}

static int seen(const parsed_t *ps, const char *name) {
    const flag_t *f = find_long(name, strlen(name));
    return f && ps->seen[flag_index(f)];
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}


// An output file: its directory exists and is writable, and it is not a directory itself.
static void check_output_path(const char *disp, const char *path) {
    char dir[TT_PATH_MAX];
    struct stat st;
    path_dir(path, dir, sizeof dir);
    if (stat(dir, &st) != 0)
        usage_error("%s %s: directory %s does not exist (create it or choose another path)", disp, path, dir);
    if (!S_ISDIR(st.st_mode)) usage_error("%s %s: %s is not a directory (choose another path)", disp, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        usage_error("%s %s: directory %s is not writable (choose another path)", disp, path, dir);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        usage_error("%s %s: is a directory (accepted: a file path)", disp, path);
}

// An output that is also a file the command reads would be truncated under it (a --data text
// file, which the run maps, ends it with SIGBUS; --log over --profile loses the profile), and
// two outputs in one file lose one: refused before anything is opened.
static void check_apart(const char *out_flag, const char *out, const char *in_flag, const char *in) {
    if (path_same_file(out, in))
        usage_error("%s %s: is the %s file too (choose another path for %s)", out_flag, out, in_flag, out_flag);
}

// train's and plan's outputs (--log, --trace) apart from what they read: --data, --profile and
// the --init-from folder (train checks --resume's, once it knows which step folder it reads).
static void check_outputs_apart(const config_t *c) {
    const char *data = strcmp(c->data, "synthetic") != 0 ? c->data : "";
    for (int o = 0; o < 2; o++) {
        const char *flag = o ? "--trace" : "--log", *out = o ? c->trace_path : c->log_path;
        check_apart(flag, out, "--data", data);
        check_apart(flag, out, "--profile", c->profile_path);
        if (path_inside(out, c->init_from))
            usage_error("%s %s: lies inside --init-from %s, which the run reads (choose a path outside it)", flag, out,
                        c->init_from);
        // --save's own files: latest, the lock and the folders a save writes, renames and prunes
        char first[256];
        if (c->save_dir[0] && path_first_below(out, c->save_dir, first, sizeof first) &&
            (!strcmp(first, "latest") || !strcmp(first, ".lock") || !strncmp(first, "step-", 5) ||
             !strncmp(first, ".tmp-", 5)))
            usage_error("%s %s: is --save %s's %s, which the run's saves rewrite or remove (choose another path; beside "
                        "the step folders is fine)", flag, out, c->save_dir, first);
    }
    check_apart("--trace", c->trace_path, "--log", c->log_path);
}

// An explicit --profile that a run reads (bench calibrate writes it): it exists. Its contents
// are checked where it is loaded (train_load_profile), with their own errors.
static void check_profile(const config_t *cfg) {
    struct stat st;
    if (cfg->profile_path[0] && stat(cfg->profile_path, &st) != 0 && errno == ENOENT)
        usage_error("--profile %s: no such file (tiertrain bench calibrate --profile %s writes it)", cfg->profile_path,
                    cfg->profile_path);
}

// An input file: exists, is a regular file, and opens for reading. (A FIFO is refused before
// anything opens it: its open would wait for a writer.)
static void check_input_path(const char *what, const char *path, const char *accepts) {
    struct stat st;
    if (stat(path, &st) != 0) usage_error("%s %s: %s (accepted: %s)", what, path, strerror(errno), accepts);
    if (S_ISDIR(st.st_mode)) usage_error("%s %s: is a directory (accepted: %s)", what, path, accepts);
    if (!S_ISREG(st.st_mode)) usage_error("%s %s: not a regular file (accepted: %s)", what, path, accepts);
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) usage_error("%s %s: cannot read: %s (accepted: %s)", what, path, strerror(errno), accepts);
    close(fd);
}

static void check_shape(const config_t *c) {
    if (c->C % c->NH != 0) {
        int hs = c->C / c->NH;
        hs -= hs % 2;
        if (hs < 2) hs = 2;
        usage_error("--dim %d is not a multiple of --heads %d (accepted: --dim = heads x an even head size, e.g. %d or %d)",
                    c->C, c->NH, c->NH * hs, c->NH * (hs + 2));
    }
    int hs = c->C / c->NH;
    if (hs % 2 != 0) { // the even head sizes either side (none below 2)
        char eg[64];
        if (hs > 1) snprintf(eg, sizeof eg, "--dim %d or --dim %d", c->NH * (hs - 1), c->NH * (hs + 1));
        else snprintf(eg, sizeof eg, "--dim %d", c->NH * (hs + 1));
        usage_error("--dim %d / --heads %d = head size %d, which is odd (RoPE rotates channel pairs; accepted: an even "
                    "head size, e.g. %s)", c->C, c->NH, hs, eg);
    }
    if (c->NH % c->NKV != 0) {
        char divs[256];
        size_t n = 0;
        divs[0] = 0;
        for (int d = 1; d <= c->NH && n + 16 < sizeof divs; d++)
            if (c->NH % d == 0) n += (size_t)snprintf(divs + n, sizeof divs - n, "%s%d", n ? ", " : "", d);
        usage_error("--kv-heads %d does not divide --heads %d (accepted: a divisor of %d: %s)", c->NKV, c->NH, c->NH, divs);
    }
    if ((int64_t)c->B * c->T > (int64_t)1 << 30)
        usage_error("--batch %d x --seq %d = %lld tokens per micro-batch (accepted: at most 2^30; lower --batch and "
                    "raise --accum)", c->B, c->T, (long long)c->B * c->T);
}

// --resume (train, plan): the model is the checkpoint's where the run does not say otherwise.
// A shape flag, --seq or --tie (or --model, for all of them), --rope-theta, --norm-eps or
// --precision given keeps the run's value, which must then agree: train refuses a difference
// naming the first flag (checkpoint_check_config), as before. So is the training recipe — the
// data, --batch, --accum, the schedule (--steps included: the run continues to its end) and
// AdamW's settings — where no flag gives it; one given may differ (train says so: the run is
// then not the one that saved it). A folder that cannot be read changes nothing here: train
// reads it again and says why.
static void apply_resume(config_t *cfg, const parsed_t *ps) {
    ckpt_info_t *info = calloc(1, sizeof *info);
    char dir[TT_PATH_MAX], err[1024];
    if (!info) fail_with(-ENOMEM, "out of memory");
    // under a launcher rank 0 alone reads the folder and sends what it found, as train does
    comm_t *w = comm_world();
    int rc = 0;
    if (comm_rank(w) == 0 && (rc = checkpoint_resolve(cfg->resume, dir, sizeof dir, err, sizeof err)) == 0)
        rc = checkpoint_info(dir, info, err, sizeof err);
    if (comm_size(w) > 1) {
        char e2[512];
        if (comm_bcast(w, &rc, sizeof rc, 0, e2, sizeof e2) != 0 || comm_bcast(w, info, sizeof *info, 0, e2, sizeof e2))
            fail_with(-EIO, "%s", e2);
    }
    if (rc == 0) {
        const int preset = seen(ps, "model");
        const struct { const char *flag; int *dst, val; } ints[] = {
            {"layers", &cfg->L, info->L}, {"dim", &cfg->C, info->C},   {"heads", &cfg->NH, info->NH},
            {"kv-heads", &cfg->NKV, info->NKV}, {"ffn", &cfg->F, info->F}, {"vocab", &cfg->V, info->V},
            {"seq", &cfg->T, info->T},    {"tie", &cfg->tie, info->tie},
        };
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
            if (!preset && !seen(ps, ints[i].flag)) *ints[i].dst = ints[i].val;
        if (!seen(ps, "rope-theta")) cfg->rope_theta = info->rope_theta;
        cfg->rope_scaling = info->rope_scaling; // no flag says otherwise
        if (!seen(ps, "norm-eps")) cfg->norm_eps = info->norm_eps;
        if (!seen(ps, "precision")) cfg->precision = info->precision;
        cfg->max_pos = info->max_pos;
        cfg->model_resumed = !preset;
        for (int i = 0; i < ckpt_nrecipe; i++) {
            const ckpt_recipe_t *rc = &ckpt_recipe[i];
            if (seen(ps, rc->flag)) continue;
            const double v = ckpt_recipe_get(rc, info, rc->info_off);
            if (rc->is_int) *(int *)((char *)cfg + rc->cfg_off) = (int)v;
            else *(double *)((char *)cfg + rc->cfg_off) = v;
        }
        // --accum is each rank's: the step's micro-batches (accum × ranks) are kept on another
        // world size, which must divide them (a folder that does not record its world keeps the
        // flag's); --accum given trains another batch, said by train's notice
        const int world = cfg->command == CMD_PLAN ? (cfg->ranks > 1 ? cfg->ranks : 1) : comm_size(w);
        const int64_t mbs = (int64_t)info->accum * info->ranks;
        if (!seen(ps, "accum") && info->ranks > 0 && (mbs % world != 0 || mbs / world > TT_ACCUM_MAX))
            usage_error("--resume %s: its steps take %lld micro-batch%s (--accum %d on %d rank%s), which %d ranks "
                        "cannot share evenly (run on a number of ranks that divides %lld, or give --accum to train with "
                        "another batch)", cfg->resume, (long long)mbs, mbs > 1 ? "es" : "", info->accum, info->ranks,
                        info->ranks > 1 ? "s" : "", world, (long long)mbs);
        if (!seen(ps, "accum") && info->ranks > 0) cfg->accum = (int)(mbs / world);
        struct stat st;
        if (!seen(ps, "data") && strcmp(info->data, "synthetic") != 0 && stat(info->data, &st) != 0)
            usage_error("--resume %s: the data it was trained on, %s: %s (give --data FILE: that file where it is now, "
                        "or other data to go on with)", cfg->resume, info->data, strerror(errno));
        if (!seen(ps, "data")) snprintf(cfg->data, sizeof cfg->data, "%s", info->data);
    }
    free(info);
}

// --init-from: the shape is the folder's config.json. A shape flag given as well must say the
// same (naming the field where it does not); --seq defaults to max_position_embeddings, at
// most 1024, and may not exceed it.
static void apply_init_from(config_t *cfg, const parsed_t *ps) {
    const char *dir = cfg->init_from;
    if (cfg->resume[0])
        usage_error("--init-from %s and --resume %s: give one (--resume continues a tiertrain checkpoint with its "
                    "optimizer state and data position; --init-from starts afresh from a folder's weights)", dir,
                    cfg->resume);
    if (seen(ps, "model"))
        usage_error("--model %s: with --init-from the shape is %s/config.json's (drop --model)", cfg->preset, dir);
    hf_config_t hc;
    char err[1024] = "";
    // under a launcher rank 0 alone reads the folder (no shared filesystem needed) and sends
    // what it found; every rank then refuses or goes on alike
    comm_t *w = comm_world();
    int rc = comm_rank(w) == 0 ? hf_read_config(dir, &hc, err, sizeof err) : 0;
    if (comm_size(w) > 1) {
        char e2[512];
        if (comm_bcast(w, &rc, sizeof rc, 0, e2, sizeof e2) != 0 || comm_bcast(w, &hc, sizeof hc, 0, e2, sizeof e2) != 0 ||
            comm_bcast(w, err, sizeof err, 0, e2, sizeof e2) != 0)
            fail_with(-EIO, "%s", e2);
    }
    if (rc != 0) fail_with(load_rc(rc), "%s", err);
    const struct { const char *flag, *field; int *dst, val; } ints[] = {
        {"layers", "num_hidden_layers", &cfg->L, hc.L},         {"dim", "hidden_size", &cfg->C, hc.C},
        {"heads", "num_attention_heads", &cfg->NH, hc.NH},     {"kv-heads", "num_key_value_heads", &cfg->NKV, hc.NKV},
        {"ffn", "intermediate_size", &cfg->F, hc.F},           {"vocab", "vocab_size", &cfg->V, hc.V},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (seen(ps, ints[i].flag) && *ints[i].dst != ints[i].val)
            usage_error("--%s %d: %s/config.json has %s %d (drop --%s: the shape is the folder's)", ints[i].flag,
                        *ints[i].dst, dir, ints[i].field, ints[i].val, ints[i].flag);
        *ints[i].dst = ints[i].val;
    }
    if (seen(ps, "tie") && !hc.tie)
        usage_error("--tie: %s/config.json has tie_word_embeddings false (drop --tie: the folder has its own "
                    "lm_head)", dir);
    cfg->tie = hc.tie;
    if (seen(ps, "rope-theta") && cfg->rope_theta != hc.rope_theta)
        usage_error("--rope-theta %g: %s/config.json has rope_theta %g (drop --rope-theta)", cfg->rope_theta, dir,
                    hc.rope_theta);
    if (seen(ps, "norm-eps") && (float)cfg->norm_eps != (float)hc.norm_eps)
        usage_error("--norm-eps %g: %s/config.json has rms_norm_eps %g (drop --norm-eps)", cfg->norm_eps, dir,
                    hc.norm_eps);
    cfg->rope_theta = hc.rope_theta;
    cfg->rope_scaling = hc.rope_scaling;
    cfg->norm_eps = hc.norm_eps;
    cfg->max_pos = hc.max_pos;
    if (!seen(ps, "seq")) cfg->T = hc.max_pos < 1024 ? hc.max_pos : 1024;
    else if (cfg->T > hc.max_pos && cfg->command == CMD_EVAL) // measuring past the context is eval's to do
        notice("--seq %d: over max_position_embeddings %d of %s/config.json: the model was not trained for sequences "
               "this long, so the loss measures how it extrapolates", cfg->T, hc.max_pos, dir);
    else if (cfg->T > hc.max_pos)
        usage_error("--seq %d: over max_position_embeddings %d of %s/config.json (the model was not trained for longer "
                    "sequences; lower --seq)", cfg->T, hc.max_pos, dir);
}

// --schedule auto / --checkpoints auto resolve here, so every run prints what it does.
static void resolve_schedule(config_t *cfg) {
    cfg->schedule_auto = cfg->schedule == SCHEDULE_AUTO;
    cfg->acts_auto = cfg->acts_tier == ACTS_AUTO;
    config_resolve_schedule(cfg);
}

// --recompute's word or number (blocks recomputed) into cfg->kept_blocks (none: the head's
// logits too, cfg->logits_kept); auto is left to the plan (plan_recompute_auto), with nothing
// kept until then.
static void resolve_recompute(config_t *cfg) {
    const char *a = cfg->recompute_arg;
    char *end = NULL;
    long n = strtol(a, &end, 10);
    cfg->recompute_auto = !strcmp(a, "auto");
    config_keep_nothing(cfg);
    if (cfg->recompute_auto || !strcmp(a, "full")) return;
    if (!strcmp(a, "none")) { // nothing computed twice (a vocabulary of one quantum has no logits to keep)
        cfg->kept_blocks = cfg->L;
        cfg->logits_kept = cfg->V > CE_QUANTUM;
    } else if (a[0] && *end == 0 && n >= 0 && n <= cfg->L) {
        cfg->kept_blocks = cfg->L - (int)n;
    } else {
        usage_error("--recompute %s: accepted: auto, full, none, or a number of blocks 0..%d (the model has %d)", a,
                    cfg->L, cfg->L);
    }
}

// A cache flag's word or size (--host-cache, --optimizer-cache) into *bytes; auto is left to
// the plan (plan_host_cache_auto, plan_optim_cache_auto), with nothing cached until then.
static void resolve_cache(const char *flag, const char *a, uint64_t *bytes, int *automatic) {
    *bytes = 0;
    *automatic = !strcmp(a, "auto");
    if (*automatic || !strcmp(a, "none") || !a[0]) return;
    int rc = parse_size(a, bytes);
    if (rc == -ERANGE || rc == -EDOM)
        usage_error("--%s %s: %s (accepted: none, auto, or a size such as 8G)", flag, a,
                    rc == -EDOM ? "rounds to 0 bytes" : "out of range");
    if (rc < 0) usage_error("--%s %s: not a size (accepted: none, auto, or a size such as 8G)", flag, a);
}

static void resolve_caches(config_t *cfg) {
    resolve_cache("host-cache", cfg->host_cache_arg, &cfg->host_cache, &cfg->host_cache_auto);
    resolve_cache("optimizer-cache", cfg->optim_cache_arg, &cfg->optim_cache, &cfg->optim_cache_auto);
}

static void check_data(const config_t *c) {
    if (strcmp(c->data, "synthetic") == 0) {
        if (c->V < 128)
            usage_error("--data synthetic: the corpus is ASCII text and needs --vocab >= 128 (got --vocab %d)", c->V);
        return;
    }
    check_input_path("--data", c->data, "synthetic, a text file, or an llm.c .bin token file");
    if (!ends_with(c->data, ".bin") && c->V < 256)
        usage_error("--data %s: a text file's bytes are tokens 0..255, which needs --vocab >= 256 (got --vocab %d; "
                    "or give an llm.c .bin token file)", c->data, c->V);
}

// A directory on a filesystem with no blocks at all (/proc, /sys): writable to root, but it
// holds no files (its free space reads 0).
static int no_storage(const char *dir) {
    struct statvfs v;
    return statvfs(dir, &v) == 0 && v.f_blocks == 0;
}

// --save DIR: an existing directory, or a new one whose parent exists (made at the first save),
// on a filesystem that stores files.
static void check_save_dir(const char *dir) {
    struct stat st;
    char parent[TT_PATH_MAX];
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) usage_error("--save %s: exists and is not a directory (give a directory)", dir);
        if (access(dir, W_OK | X_OK) != 0) usage_error("--save %s: not writable (give a writable directory)", dir);
    } else {
        check_output_path("--save", dir);
    }
    path_dir(dir, parent, sizeof parent);
    if (no_storage(stat(dir, &st) == 0 ? dir : parent))
        usage_error("--save %s: lies on a filesystem that stores no files (such as /proc or /sys; give a directory on a "
                    "disk)", dir);
}

static void check_nvme_paths(const char *list) {
    if (!*list) return;
    const char *p = list;
    struct {
        dev_t dev;
        ino_t ino;
        char dir[TT_PATH_MAX];
    } seen[IO_MAX_PATHS]; // (more directories are the store's refusal)
    int nseen = 0;
    for (;;) {
        size_t n = strcspn(p, ",");
        char dir[TT_PATH_MAX];
        if (n == 0) usage_error("--nvme-path %s: empty directory in the list (accepted: DIR[,DIR...])", list);
        snprintf(dir, sizeof dir, "%.*s", (int)n, p);
        struct stat st;
        if (strstr(dir, "%r")) { // each rank's folder, made by train once the rank is known
            p += n;
            if (!*p) break;
            p++;
            continue;
        }
        if (stat(dir, &st) != 0)
            usage_error("--nvme-path %s: %s: %s (accepted: existing writable directories, comma-separated)", list, dir,
                        strerror(errno));
        if (!S_ISDIR(st.st_mode))
            usage_error("--nvme-path %s: %s is not a directory (accepted: existing writable directories)", list, dir);
        if (access(dir, W_OK | X_OK) != 0)
            usage_error("--nvme-path %s: %s is not writable (accepted: existing writable directories)", list, dir);
        if (no_storage(dir))
            usage_error("--nvme-path %s: %s lies on a filesystem that stores no files (such as /proc or /sys; give a "
                        "directory on a disk)", list, dir);
        // one folder named twice would be counted as two disks' rates and space
        for (int i = 0; i < nseen; i++)
            if (seen[i].dev == st.st_dev && seen[i].ino == st.st_ino)
                usage_error("--nvme-path %s: %s is the same directory as %s (name each directory once)", list, dir,
                            seen[i].dir);
        if (nseen < (int)(sizeof seen / sizeof seen[0])) {
            seen[nseen].dev = st.st_dev;
            seen[nseen].ino = st.st_ino;
            snprintf(seen[nseen++].dir, sizeof seen[0].dir, "%s", dir);
        }
        p += n;
        if (!*p) break;
        p++;
    }
}

// --update backward where it cannot run (the backend --device auto picks is known at init,
// which says so then).
static void check_update(const config_t *cfg) {
    const char *why = cfg->update_when == UPDATE_BACKWARD && !cfg->offload_auto
                          ? tier_update_backward_refusal(cfg, cfg->device) : NULL;
    if (why) usage_error("--update backward: %s", why);
}

static void table_check_or_die(void) {
    char err[512];
    if (cli_table_check(err, sizeof err) != 0) {
        fprintf(stderr, "tiertrain: %s:%d: flag table: %s\n", __FILE__, __LINE__, err);
        abort();
    }
}

void cli_parse(int argc, char **argv, config_t *cfg) {
    table_check_or_die();
    apply_defaults(cfg);
    model_preset("small", cfg);
    if (argc < 2) usage_error("no subcommand (accepted: " COMMANDS_ACCEPTED "; see tiertrain --help)");

    // Global actions first: `tiertrain --help`, `tiertrain --version`, `tiertrain --help-markdown`.
    const char *a = argv[1];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { cli_help(stdout, CMD_NONE); exit(0); }
    if (strcmp(a, "--version") == 0) { printf("tiertrain %s\n", TT_VERSION); exit(0); }
    if (strcmp(a, "--help-markdown") == 0) { cli_help_markdown(stdout); exit(0); }
    const command_info_t *ci = NULL;
    for (int i = 0; i < CLI_NCOMMANDS; i++)
        if (strcmp(a, cli_commands[i].name) == 0) ci = &cli_commands[i];
    if (!ci) {
        if (a[0] == '-') {
            size_t n = strcspn(a, "=");
            const char *p = a;
            while (*p == '-') p++;
            const flag_t *f = find_long(p, n - (size_t)(p - a));
            if (f && !f->hidden)
                usage_error("%.*s: flags go after the subcommand (e.g. tiertrain train %.*s ...; see tiertrain --help)",
                            (int)n, a, (int)n, a);
            unknown_flag(a, n, NULL);
        }
        const char *names[CLI_NCOMMANDS];
        for (int i = 0; i < CLI_NCOMMANDS; i++) names[i] = cli_commands[i].name;
        const char *s = cli_closest(a, names, CLI_NCOMMANDS);
        if (s) usage_error("%s: unknown subcommand (did you mean %s? accepted: " COMMANDS_ACCEPTED ")", a, s);
        usage_error("%s: unknown subcommand (accepted: " COMMANDS_ACCEPTED "; see tiertrain --help)", a);
    }
    cfg->command = ci->cmd;
    // --help / --version anywhere among the flags win over everything else.
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { cli_help(stdout, ci->cmd); exit(0); }
        if (strcmp(argv[i], "--version") == 0) { printf("tiertrain %s\n", TT_VERSION); exit(0); }
    }

    parsed_t ps;
    memset(&ps, 0, sizeof ps);
    walk(argc, argv, ci, cfg, &ps, 0);
    // Resolve in order: defaults, the preset, then the flags (the walk above validated them).
    apply_defaults(cfg);
    cfg->command = ci->cmd;
    model_preset(ps.preset ? ps.preset : "small", cfg);
    walk(argc, argv, ci, cfg, &ps, 1);

    switch (ci->cmd) {
    case CMD_TRAIN:
    case CMD_PLAN:
        if (cfg->init_from[0]) apply_init_from(cfg, &ps);
        if (cfg->resume[0]) apply_resume(cfg, &ps);
        check_shape(cfg);
        resolve_recompute(cfg);
        resolve_caches(cfg);
        if (cfg->min_lr > cfg->lr) {
            if (seen(&ps, "min-lr"))
                usage_error("--min-lr %g: above --lr %g (accepted: 0..%g; the cosine decay goes from --lr down to "
                            "--min-lr)", cfg->min_lr, cfg->lr, cfg->lr);
            cfg->min_lr = cfg->lr;
        }
        check_data(cfg);
        if (cfg->log_path[0]) check_output_path("--log", cfg->log_path);
        if (cfg->save_dir[0]) check_save_dir(cfg->save_dir);
        if (cfg->save_every && !cfg->save_dir[0])
            usage_error("--save-every %d: needs --save DIR (where to put the checkpoints)", cfg->save_every);
        if (cfg->trace_path[0]) check_output_path("--trace", cfg->trace_path);
        check_profile(cfg);
        check_outputs_apart(cfg);
        check_nvme_paths(cfg->nvme_path);
        resolve_schedule(cfg);
        if (cfg->grads_tier == TIER_NVME && cfg->optim_tier != TIER_NVME && !cfg->offload_auto)
            usage_error("--grads nvme: needs --optimizer nvme (the optimizer reads each shard's gradient with its "
                        "states, in one extent; add --optimizer nvme, or keep --grads host)");
        check_update(cfg);
        if (cfg->host_cache && cfg->params_tier != TIER_NVME && !cfg->offload_auto)
            usage_error("--host-cache %s: caches NVMe-resident parameters, but --params is not nvme (drop --host-cache "
                        "or add --params nvme)", format_bytes((char[32]){0}, 32, cfg->host_cache));
        if (cfg->optim_cache && cfg->optim_tier != TIER_NVME && !cfg->offload_auto)
            usage_error("--optimizer-cache %s: caches NVMe-resident optimizer states, but --optimizer is not nvme "
                        "(drop --optimizer-cache or add --optimizer nvme)",
                        format_bytes((char[32]){0}, 32, cfg->optim_cache));
        break;
    case CMD_BENCH:
        if (ps.npositional == 0) usage_error("bench: missing benchmark name (accepted: %s)", BENCH_ACCEPTED);
        snprintf(cfg->bench_name, sizeof cfg->bench_name, "%s", ps.positional[0]);
        if (strcmp(cfg->bench_name, "calibrate") != 0) check_profile(cfg);
        check_nvme_paths(cfg->nvme_path);
        if ((cfg->save_dir[0] || seen(&ps, "save-dtype")) && strcmp(cfg->bench_name, "checkpoint") != 0)
            usage_error("--%s: bench %s does not save (only bench checkpoint takes it)",
                        cfg->save_dir[0] ? "save" : "save-dtype", cfg->bench_name);
        if (cfg->save_dir[0]) check_save_dir(cfg->save_dir);
        // the benchmarks that train take the training flags, resolved as train resolves them
        static const char *const shape_flags[] = {"model", "layers", "dim", "heads", "kv-heads", "ffn", "vocab", NULL};
        for (int i = 0; shape_flags[i]; i++) cfg->shape_given |= seen(&ps, shape_flags[i]);
        cfg->seq_given = seen(&ps, "seq");
        cfg->batch_given = seen(&ps, "batch");
        cfg->steps_given = seen(&ps, "steps");
        cfg->optim_cache_given = seen(&ps, "optimizer-cache");
        if (!strcmp(cfg->bench_name, "train")) config_bench_train_defaults(cfg); // before the checks below
        check_shape(cfg);
        resolve_recompute(cfg);
        resolve_caches(cfg);
        resolve_schedule(cfg);
        check_update(cfg);
        break;
    case CMD_EVAL:
        if (!cfg->resume[0] && !cfg->init_from[0])
            usage_error("eval: missing --resume DIR or --init-from DIR (usage: %s)", ci->usage);
        if (!seen(&ps, "data")) // (not the default corpus: a checkpoint is scored on the tokens asked for)
            usage_error("eval: missing --data FILE (the tokens to score: a text file or an llm.c .bin token file, or "
                        "synthetic for the built-in corpus; usage: %s)", ci->usage);
        if (cfg->init_from[0]) apply_init_from(cfg, &ps);
        if (strcmp(cfg->data, "synthetic") != 0) check_input_path("--data", cfg->data, "a text file or an llm.c .bin token file");
        cfg->seq_given = seen(&ps, "seq");
        cfg->precision_given = seen(&ps, "precision");
        break;
    case CMD_TOKENIZE:
        if (ps.npositional == 0) usage_error("tokenize: missing input file (usage: %s)", ci->usage);
        if (strlen(ps.positional[0]) >= sizeof cfg->tok_in)
            usage_error("tokenize: input path too long (accepted: at most %zu bytes)", sizeof cfg->tok_in - 1);
        snprintf(cfg->tok_in, sizeof cfg->tok_in, "%s", ps.positional[0]);
        if (!cfg->tok_out[0]) usage_error("tokenize %s: missing -o OUT.bin (usage: %s)", cfg->tok_in, ci->usage);
        check_input_path("tokenize: input", cfg->tok_in, "a readable text file");
        if (!ends_with(cfg->tok_out, ".bin"))
            usage_error("-o %s: token files must end in .bin (that is how --data tells them from text)", cfg->tok_out);
        check_output_path("-o", cfg->tok_out);
        break;
    case CMD_REPORT:
        if (ps.npositional == 0) usage_error("report: missing the run's --log file (usage: %s)", ci->usage);
        if (strlen(ps.positional[0]) >= sizeof cfg->tok_in)
            usage_error("report: input path too long (accepted: at most %zu bytes)", sizeof cfg->tok_in - 1);
        snprintf(cfg->tok_in, sizeof cfg->tok_in, "%s", ps.positional[0]);
        if (!cfg->tok_out[0]) usage_error("report %s: missing -o report.html (usage: %s)", cfg->tok_in, ci->usage);
        check_input_path("report: input", cfg->tok_in, "a --log file of tiertrain train, or plan's JSON line");
        if (cfg->trace_path[0]) check_input_path("--trace", cfg->trace_path, "a --trace file of tiertrain train");
        check_output_path("-o", cfg->tok_out);
        check_apart("-o", cfg->tok_out, "input", cfg->tok_in);
        check_apart("-o", cfg->tok_out, "--trace", cfg->trace_path);
        break;
    case CMD_NONE: break;
    }
}

const char *cli_first_difference(const config_t *a, const config_t *b) {
    for (size_t i = 0; i < CLI_NFLAGS; i++) {
        const flag_t *f = &cli_flags[i];
        if (!f->fsize) continue;
        const char *x = (const char *)a + f->off, *y = (const char *)b + f->off;
        int differs = f->kind == FK_STRING || f->kind == FK_PRESET ? strncmp(x, y, f->fsize) != 0
                                                                   : memcmp(x, y, f->fsize) != 0;
        if (differs) return f->name;
    }
    return NULL;
}
