// tier.h — residency: where each shard's states live and the tiers that hold them (the
// device arena through the backend, the host pool, the NVMe store). For now, the adapters
// from the run configuration to the host pool's and the NVMe store's options, so that
// hostmem and io/ never see config_t.
#pragma once
#include <stdint.h>
#include "config.h"
#include "hostmem.h"
#include "io.h"

// The host pool's options from the run configuration (budget, NUMA node, quiet) for a pool
// of size bytes, with pin and hugepages on.
void tier_hostmem_opts(hostmem_opts_t *o, const config_t *cfg, uint64_t size);
// The NVMe store's options from the run configuration (paths, block, qd, engine, sqpoll,
// verify, keep) for a store of size bytes; the other fields are zero.
void tier_nvme_opts(nvme_store_opts_t *o, const config_t *cfg, uint64_t size);
