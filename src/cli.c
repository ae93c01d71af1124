// cli.c — STUB, replaced by the flag-table implementation.
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "util.h"
void cli_parse(int argc, char **argv, config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    (void)argc; (void)argv;
    usage_error("cli not implemented yet");
}
void config_print(const config_t *cfg, FILE *f) { (void)cfg; (void)f; }
