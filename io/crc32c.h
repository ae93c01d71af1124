// crc32c.h — CRC-32C (Castagnoli, the iSCSI/ext4/NVMe polynomial 0x1EDC6F41, reflected).
// Used by the io engine's --io-verify to checksum each extent written and check it on read.
// Two implementations with identical results: SSE4.2 `crc32` instructions when the CPU has
// them (three interleaved streams, chosen once at run time), and a portable slicing-by-8
// table otherwise.
// Does not know about files, stores or tickets. Thread-safe: no mutable state after the
// first call (the choice is made once, idempotently).
#pragma once
#include <stddef.h>
#include <stdint.h>

// CRC-32C of n bytes at p, continuing from crc (start with 0). Standard presentation:
// crc32c(0, "123456789", 9) == 0xE3069283, and
// crc32c(crc32c(0, a, na), b, nb) == crc32c over a followed by b.
uint32_t crc32c(uint32_t crc, const void *p, size_t n);
// The portable table version (tests compare the two).
uint32_t crc32c_sw(uint32_t crc, const void *p, size_t n);
// "sse4.2" or "table": which one crc32c() uses. TT_CRC32C=sw in the environment forces
// the table (read once, at the first call).
const char *crc32c_impl(void);
