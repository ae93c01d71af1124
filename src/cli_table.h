// cli_table.h — the flag table and the subcommand table that drive parsing (cli.c), help and
// the README's flag reference (cli_help.c): their types, the tables themselves (cli_table.c)
// and the few helpers all three use. For src/cli*.c only; the rest of the program sees
// cli.h and config.h.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "cli.h"
#include "config.h"

typedef enum {
    FK_INT,      // int, range [lo, hi]; optional word (e.g. "auto") standing for word_val
    FK_U64,      // uint64_t, any non-negative integer
    FK_SIZE,     // uint64_t bytes via parse_size; range, alignment, optional word ("none" = 0)
    FK_DOUBLE,   // double, range with open/closed ends
    FK_ENUM,     // int index into values "a|b|c" (the config enums follow that order)
    FK_PRESET,   // char[]: a model preset name
    FK_STRING,   // char[]: a path or list; contents checked after parsing
    FK_SWITCH,   // int set to 1; takes no value
    FK_HELP,     // actions, handled before parsing
    FK_VERSION,
    FK_MARKDOWN,
} flag_kind_t;

typedef enum { G_GENERAL = 0, G_MODEL, G_DATA, G_OPTIM, G_RUN, G_IO, G_OUTPUT, G_BENCH, G_TOKENIZE, G_COUNT } flag_group_t;

typedef struct {
    const char *name;      // long name without dashes
    char short_name;       // single-letter alias or 0
    const char *metavar;   // shown after the name; NULL for switches and actions
    flag_kind_t kind;
    size_t off, fsize;     // field in config_t
    const char *def;       // default, parsed like a user value; NULL = none (set elsewhere)
    const char *def_show;  // shown as the default instead of def, in words
    double lo, hi;         // FK_INT / FK_DOUBLE / FK_SIZE range
    int lo_open, hi_open;  // FK_DOUBLE: the end is excluded
    uint64_t align;        // FK_SIZE: must be a multiple of this
    const char *values;    // FK_ENUM "a|b|c"; FK_INT / FK_SIZE: a word accepted too
    int word_val;          // what that word stands for (FK_INT; FK_SIZE words mean 0)
    const char *accepts;   // FK_STRING: what is accepted, in words
    flag_group_t group;
    unsigned cmds;         // CLI_CMD_* bits; 0 = anywhere
    int hidden;            // not in help or the README
    const char *help;
} flag_t;

typedef struct {
    const char *name;
    command_t cmd;
    unsigned bit;
    const char *usage;
    const char *about;
} command_info_t;

extern const char *const cli_group_name[G_COUNT];
extern const char *const cli_group_title[G_COUNT];
enum { CLI_NFLAGS = 70, CLI_NCOMMANDS = 6, CLI_NBENCH = 9 };
extern const flag_t cli_flags[CLI_NFLAGS];
extern const command_info_t cli_commands[CLI_NCOMMANDS];
extern const char *const cli_bench_names[CLI_NBENCH];
#define BENCH_ACCEPTED "gemm, io, adam, calibrate, overlap, capacity, train, comm, checkpoint"
#define COMMANDS_ACCEPTED "train, plan, eval, bench, tokenize, report" // cli_commands' names (test_cli checks)

const command_info_t *cli_command_of(command_t cmd);
// The subcommands of a flag's bits in words ("train, plan"; 0: "all").
void cli_commands_text(unsigned cmds, char *buf, size_t len);
// "4096" -> "4K", 67108864 -> "64M": the shortest exact spelling with a binary unit.
void cli_size_short(char *buf, size_t len, uint64_t b);
// What a flag accepts, in words. long_form: "an integer 1..4096" (errors) vs "1..4096" (help).
void cli_accepted(const flag_t *f, char *buf, size_t len, int long_form);
// The flag as people type it: "--steps", or "-o" when given short.
void cli_display_name(const flag_t *f, int used_short, char *buf, size_t len);
// Closest candidate to s among names[], or NULL when nothing is close enough.
const char *cli_closest(const char *s, const char *const *names, size_t n);
