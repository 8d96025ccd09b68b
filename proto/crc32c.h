/* proto/crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of the
 * KV wire format (proto/KV_FORMAT.md). Same parameters as iSCSI (RFC 3720, appendix B.4), ext4
 * and SSE4.2's crc32 instruction: initial value ~0, final xor ~0.
 *
 * Debian ships no C library for it (only a Python module), so it is written here: slicing-by-8
 * tables, the SSE4.2 instruction when the CPU has it, or for long inputs carry-less folding with
 * VPCLMULQDQ where the CPU has that too (checked at run time).
 * Thread safety: any thread; the tables are built once (pthread_once). */
#ifndef TANDEM_PROTO_CRC32C_H
#define TANDEM_PROTO_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* Continues a CRC: crc = proto_crc32c(0, a, na); crc = proto_crc32c(crc, b, nb) equals the CRC
 * of a followed by b. proto_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t proto_crc32c(uint32_t crc, const void *data, size_t n);
/* The portable (table) path alone, for tests that compare the two. */
uint32_t proto_crc32c_sw(uint32_t crc, const void *data, size_t n);
/* The path proto_crc32c takes for long inputs: "vpclmulqdq" (carry-less folding, 256 bytes and
 * up, on CPUs with AVX2 and VPCLMULQDQ), "sse4.2" (the crc32 instruction, three streams) or
 * "table". Setting proto_crc32c_no_fold (before any thread uses it: tests, benchmarks) keeps
 * the folding path out. */
const char *proto_crc32c_path(void);
extern int proto_crc32c_no_fold;

#endif
