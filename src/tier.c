// tier.c — see tier.h.
#include "tier.h"
#include <string.h>

void tier_hostmem_opts(hostmem_opts_t *o, const config_t *cfg, uint64_t size) {
    memset(o, 0, sizeof *o);
    o->size = size;
    o->budget = cfg->host_budget;
    o->numa_node = cfg->numa_node;
    o->pin = 1;
    o->hugepages = 1;
    o->quiet = cfg->quiet;
}

void tier_nvme_opts(nvme_store_opts_t *o, const config_t *cfg, uint64_t size) {
    memset(o, 0, sizeof *o);
    o->paths = cfg->nvme_path;
    o->size = size;
    o->block = cfg->io_block;
    o->qd = cfg->nvme_qd;
    o->engine = cfg->io_engine;
    o->sqpoll = cfg->io_sqpoll;
    o->verify = cfg->io_verify;
    o->keep = cfg->keep_nvme;
}
