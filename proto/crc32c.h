/* proto/crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of the
 * KV wire format (proto/KV_FORMAT.md). Same parameters as iSCSI (RFC 3720, appendix B.4), ext4
 * and SSE4.2's crc32 instruction: initial value ~0, final xor ~0.
 *
 * Debian ships no C library for it (only a Python module), so it is written here: slicing-by-8
 * tables, the SSE4.2 instruction when the CPU has it, or for long inputs carry-less folding with
 * VPCLMULQDQ on 256- or 512-bit registers where the CPU has that too (checked at run time).
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
/* The path proto_crc32c takes for long inputs: "vpclmulqdq-512" (carry-less folding on 512-bit
 * registers, 1 KiB and up, on CPUs with AVX-512F and VPCLMULQDQ; the 256-bit one below that),
 * "vpclmulqdq" (on 256-bit registers, 256 bytes and up, on CPUs with AVX2 and VPCLMULQDQ),
 * "sse4.2" (the crc32 instruction, three streams) or "table". Setting proto_crc32c_no_fold
 * (before any thread uses it: tests, benchmarks) keeps the folding paths out,
 * proto_crc32c_no_512 the 512-bit one. */
const char *proto_crc32c_path(void);
extern int proto_crc32c_no_fold, proto_crc32c_no_512;
/* The CRC of A followed by B from the CRCs of each (both started from 0) and B's length:
 * proto_crc32c_combine(proto_crc32c(0, a, na), proto_crc32c(0, b, nb), nb) equals
 * proto_crc32c(0, ab, na + nb) — exact (zlib's crc32_combine method: crc_a's register times
 * x^(8 nb) modulo the polynomial, in O(log nb) 32-bit carry-less products), so that parts of a
 * buffer can be checked on several threads and joined. */
uint32_t proto_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif
