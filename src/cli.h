// cli.h — read-only views of the flag table in cli.c, for help output and tests.
// cli_parse and config_print (config.h) are the entry points; this header adds what a
// test or a tool needs to walk the table: names, which subcommands take a flag, and the
// generated help. Nothing here parses or exits.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include "config.h"

// Subcommands as bits, for cli_flag_commands().
enum {
    CLI_CMD_TRAIN = 1u << 0, CLI_CMD_PLAN = 1u << 1, CLI_CMD_BENCH = 1u << 2, CLI_CMD_TOKENIZE = 1u << 3,
    CLI_CMD_EVAL = 1u << 4, CLI_CMD_REPORT = 1u << 5
};

size_t cli_flag_count(void);
const char *cli_flag_name(size_t i);      // long name with dashes, e.g. "--nvme-qd"
char cli_flag_short(size_t i);            // 'o', 'h' or 0
int cli_flag_hidden(size_t i);            // 1 for --help-markdown (not in help or README)
unsigned cli_flag_commands(size_t i);     // CLI_CMD_* bits; 0 = accepted anywhere (--help)

// Help for one subcommand (CMD_NONE = the global help listing every flag), to f.
void cli_help(FILE *f, command_t cmd);
// The flag reference as Markdown, one table per group: the README section between
// <!-- flags:begin --> and <!-- flags:end --> is exactly this text.
void cli_help_markdown(FILE *f);
// The long name (without dashes) of the first flag in the table whose value differs between
// a and b (two ranks' resolved configurations), or NULL when none does.
const char *cli_first_difference(const config_t *a, const config_t *b);
// Checks the table itself: unique names, field sizes that match the kinds, defaults that
// parse and lie in range. Returns 0, or -1 with the problem in err. cli_parse runs it.
int cli_table_check(char *err, size_t errlen);
