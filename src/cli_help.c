// cli_help.c — `--help` (global and per subcommand) and `--help-markdown` (the README's flag
// reference), both generated from the flag table (cli_table.c).
#include <stdio.h>
#include <string.h>
#include "cli_table.h"

// ---------------------------------------------------------------- help


static void default_text(const flag_t *f, char *buf, size_t len) {
    if (f->def_show) snprintf(buf, len, "%s", f->def_show);
    else if (f->kind == FK_SWITCH) snprintf(buf, len, "off");
    else if (f->def) snprintf(buf, len, "%s", f->def);
    else buf[0] = 0;
}

// Prints "left  right" with right wrapped at 100 columns, continuation under right.
static void help_line(FILE *out, const char *left, const char *right) {
    enum { COL = 30, WIDTH = 100 };
    int col = fprintf(out, "%s", left);
    if (col >= COL - 1) { fputc('\n', out); col = 0; }
    fprintf(out, "%*s", COL - col, "");
    col = COL;
    const char *p = right;
    while (*p) {
        size_t w = strcspn(p, " ");
        if (col > COL && col + 1 + (int)w > WIDTH) { fprintf(out, "\n%*s", COL, ""); col = COL; }
        else if (col > COL) { fputc(' ', out); col++; }
        fprintf(out, "%.*s", (int)w, p);
        col += (int)w;
        p += w;
        while (*p == ' ') p++;
    }
    fputc('\n', out);
}

static void help_flag(FILE *out, const flag_t *f, int show_cmds) {
    char left[96], right[768], acc[256], def[64];
    int k = snprintf(left, sizeof left, "  ");
    if (f->short_name) k += snprintf(left + k, sizeof left - (size_t)k, "-%c, ", f->short_name);
    k += snprintf(left + k, sizeof left - (size_t)k, "--%s", f->name);
    if (f->metavar) snprintf(left + k, sizeof left - (size_t)k, " %s", f->metavar);
    cli_accepted(f, acc, sizeof acc, 0);
    default_text(f, def, sizeof def);
    size_t n = (size_t)snprintf(right, sizeof right, "%s", f->help);
    // Enums list their values in the metavar; strings and seeds say it in the help text.
    int show_acc = acc[0] && (f->kind == FK_INT || f->kind == FK_DOUBLE || f->kind == FK_SIZE || f->kind == FK_PRESET);
    if (f->kind == FK_SWITCH) def[0] = 0; // "default off" goes without saying
    if (show_acc || def[0]) {
        n += (size_t)snprintf(right + n, sizeof right - n, " (");
        if (show_acc) n += (size_t)snprintf(right + n, sizeof right - n, "%s%s", acc, def[0] ? "; " : "");
        if (def[0]) n += (size_t)snprintf(right + n, sizeof right - n, "%s%s",
                                          strcmp(def, "required") == 0 ? "" : "default ", def);
        n += (size_t)snprintf(right + n, sizeof right - n, ")");
    }
    if (show_cmds && f->cmds) {
        char c[64];
        cli_commands_text(f->cmds, c, sizeof c);
        snprintf(right + n, sizeof right - n, " [%s]", c);
    }
    help_line(out, left, right);
}

static const char *const help_footer =
    "Flags take --flag value or --flag=value. Sizes take units: 512M, 4G, 1.5GiB (K M G T, k m g t and KiB MiB\n"
    "GiB TiB are powers of 1024; KB MB GB TB powers of 1000).\n"
    "Exit codes: 0 done; 1 runtime failure (cause named); 2 bad usage or input, before any work;\n"
    "130/143 stopped by SIGINT/SIGTERM.\n";

void cli_help(FILE *out, command_t cmd) {
    const command_info_t *ci = cli_command_of(cmd);
    if (ci) {
        fprintf(out, "usage: %s\n  %s\n", ci->usage, ci->about);
        if (cmd == CMD_BENCH) fprintf(out, "  Every bench prints a table, then one JSON line {\"bench\": NAME, ...}.\n");
    } else {
        fprintf(out, "tiertrain %s: trains Llama-style transformers whose parameters, gradients and optimizer\n"
                     "states are spread over device memory, pinned host memory and NVMe.\n\nusage:\n", TT_VERSION);
        for (int i = 0; i < CLI_NCOMMANDS; i++) {
            char left[256]; // the longest usage (eval's) is 95 characters: a 96-byte buffer cut it
            snprintf(left, sizeof left, "  %s", cli_commands[i].usage);
            help_line(out, left, cli_commands[i].about);
        }
        help_line(out, "  tiertrain COMMAND --help", "the flags COMMAND accepts");
    }
    for (int g = 0; g < G_COUNT; g++) {
        // The global help names the subcommands of a group in its header when its flags
        // agree, and of each flag otherwise.
        unsigned common = 0;
        int uniform = 1, any = 0;
        for (int i = 0; i < CLI_NFLAGS; i++) {
            const flag_t *f = &cli_flags[i];
            if (f->group != (flag_group_t)g || f->hidden) continue;
            if (any && f->cmds != common) uniform = 0;
            common = f->cmds;
            any = 1;
        }
        int header = 0;
        for (int i = 0; i < CLI_NFLAGS; i++) {
            const flag_t *f = &cli_flags[i];
            if (f->group != (flag_group_t)g || f->hidden) continue;
            if (ci && f->cmds && !(f->cmds & ci->bit)) continue;
            if (!header) {
                char c[64] = "";
                if (!ci && uniform && common && common != (CLI_CMD_BENCH) && common != CLI_CMD_TOKENIZE) {
                    c[0] = ' ';
                    c[1] = '(';
                    cli_commands_text(common, c + 2, sizeof c - 3);
                    strcat(c, ")");
                }
                fprintf(out, "\n%s%s:\n", cli_group_name[g], c);
                header = 1;
            }
            help_flag(out, f, ci == NULL && !uniform);
        }
    }
    fprintf(out, "\n%s", help_footer);
}

// Markdown cell text: '|' must be escaped inside tables, even within code spans.
static void md_cell(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", out);
        else fputc(*s, out);
    }
}

void cli_help_markdown(FILE *out) {
    fprintf(out, "Flags take `--flag value` or `--flag=value`. Sizes take units: `512M`, `4G`, `1.5GiB` (K, M, G, T,\n"
                 "k, m, g, t and KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB, TB powers of 1000). `tiertrain\n"
                 "COMMAND --help` lists the flags one command accepts. This section is the output of `tiertrain\n"
                 "--help-markdown`.\n");
    for (int g = 0; g < G_COUNT; g++) {
        int header = 0;
        for (int i = 0; i < CLI_NFLAGS; i++) {
            const flag_t *f = &cli_flags[i];
            if (f->group != (flag_group_t)g || f->hidden) continue;
            if (!header) {
                fprintf(out, "\n### %s\n\n| Flag | Default | Accepted | Commands | Description |\n"
                             "| --- | --- | --- | --- | --- |\n", cli_group_title[g]);
                header = 1;
            }
            char acc[256], def[64], cmds[64];
            cli_accepted(f, acc, sizeof acc, 0);
            default_text(f, def, sizeof def);
            cli_commands_text(f->cmds, cmds, sizeof cmds);
            fputs("| ", out);
            if (f->short_name) fprintf(out, "`-%c`, ", f->short_name);
            fprintf(out, "`--%s", f->name);
            if (f->metavar) { fputc(' ', out); md_cell(out, f->metavar); }
            fputs("` | ", out);
            if (def[0] && f->def && !f->def_show) { fputc('`', out); md_cell(out, def); fputc('`', out); }
            else md_cell(out, def);
            fputs(" | ", out);
            md_cell(out, acc);
            fprintf(out, " | %s | ", cmds);
            md_cell(out, f->help);
            fputs(" |\n", out);
        }
    }
}

