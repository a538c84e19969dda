/* HMAC-MD2 (RFC 1319, RFC 2104 with MD2's 16-byte block) as the CUDA
 * driver's integrity check uses it. */
#include "integrity.h"

#include <string.h>

/* RFC 1319's substitution, a permutation of 0..255 built from pi's digits. */
static const unsigned char S[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,   243, 192, 199,
    115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212, 224, 22,  103, 66,  111, 24,
    138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160, 251, 245, 142, 187, 47,  238, 122, 169, 104,
    121, 145, 21,  178, 7,   63,  148, 194, 16,  137, 11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,
    53,  62,  204, 231, 191, 247, 151, 3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,
    170, 198, 79,  184, 56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,
    100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246, 28,  70,
    97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249, 206, 186, 197, 234, 38,
    44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129, 77,  82,  106, 220, 55,  200, 108, 193,
    171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120, 136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254,
    59,  0,   29,  57,  242, 239, 183, 14,  102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,
    80,  180, 143, 237, 31,  26,  219, 153, 141, 51,  159, 17,  131, 20,
};

struct md2 {
    unsigned char x[48]; /* state, block, state ^ block */
    unsigned char sum[16];
    unsigned char n, last; /* bytes in the block; the checksum's running byte */
};

static void md2_byte(struct md2 *m, unsigned char b)
{
    m->x[16 + m->n] = b;
    m->x[32 + m->n] = b ^ m->x[m->n];
    m->last = m->sum[m->n] ^= S[b ^ m->last];
    if (++m->n < 16)
        return;
    m->n = 0;
    unsigned t = 0;
    for (unsigned round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++)
            t = m->x[k] ^= S[t];
        t = (t + round) & 0xff;
    }
}

static void md2_bytes(struct md2 *m, const void *p, size_t n, unsigned char mask)
{
    for (size_t i = 0; i < n; i++)
        md2_byte(m, ((const unsigned char *)p)[i] ^ mask);
}

static void md2_final(struct md2 *m, unsigned char digest[16])
{
    unsigned char pad = (unsigned char)(16 - m->n), sum[16];
    for (unsigned i = 0; i < pad; i++)
        md2_byte(m, pad);
    memcpy(sum, m->sum, 16);
    md2_bytes(m, sum, 16, 0);
    memcpy(digest, m->x, 16);
}

void fgr_md2(const void *p, size_t n, unsigned char digest[16])
{
    struct md2 m = {0};
    md2_bytes(&m, p, n, 0);
    md2_final(&m, digest);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

/* The driver's key: what its first pass computes from no input at all. */
static const unsigned char key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                      0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

void fgr_integrity(const struct fgr_integrity_in *in, const struct fgr_integrity_dev *devs, int ndev,
                   uint64_t out[2])
{
    /* Versions ending in 0 or 1 get fixed answers. */
    switch (in->version % 10) {
    case 0:
        out[0] = 0x3341181c03cb675cull;
        out[1] = 0x8ed383aa1f4cd1e8ull;
        return;
    case 1:
        out[0] = 0x1841181c03cb675cull;
        out[1] = 0x8ed383aa1f4cd1e8ull;
        return;
    }
    /* The driver hashes its structures as they lie in memory: little-endian,
     * no padding (48 bytes, then 28 per device). */
    unsigned char head[48], dev[28], inner[16], digest[16];
    put32(head, in->driver_version);
    put32(head + 4, in->version);
    put32(head + 8, in->pid);
    put32(head + 12, in->thread);
    put64(head + 16, in->cudart_table);
    put64(head + 24, in->integrity_table);
    put64(head + 32, in->fn);
    put64(head + 40, in->unix_seconds);
    struct md2 m = {0};
    md2_bytes(&m, key, 16, 0x36);
    md2_bytes(&m, head, sizeof head, 0);
    for (int i = 0; i < ndev; i++) {
        memcpy(dev, devs[i].uuid, 16);
        put32(dev + 16, (uint32_t)devs[i].pci_domain);
        put32(dev + 20, (uint32_t)devs[i].pci_bus);
        put32(dev + 24, (uint32_t)devs[i].pci_device);
        md2_bytes(&m, dev, sizeof dev, 0);
    }
    md2_final(&m, inner);
    m = (struct md2){0};
    md2_bytes(&m, key, 16, 0x5c);
    md2_bytes(&m, inner, 16, 0);
    md2_final(&m, digest);
    memcpy(out, digest, 16);
}
