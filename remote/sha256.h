/* SHA-256 (FIPS 180-4), for the module images the server keeps by hash. */
#ifndef FGR_SHA256_H
#define FGR_SHA256_H

#include <stddef.h>
#include <stdint.h>

void fgr_sha256(const void *data, size_t n, uint8_t out[32]);

#endif
