/* What the compiler wrote in a cubin: kernel parameter layouts, and the
 * module-wide data a load takes (fg_cubin_data). Kernel parameter layouts: the
 * EIATTR_KPARAM_INFO records of each kernel's .nv.info.NAME section in an
 * ELF cubin, alone or inside a fatbinary (entries the fatbinary holds
 * compressed, as nvcc 13 does by default, are read where a caller gives a
 * decompressor: fg_cubin_zstd, libzstd's, loaded at run time). The remote
 * executor checks the driver's layouts against them; the simulated GPU
 * loads cubins with them.
 *
 * An .nv.info section is a run of records: u8 format, u8 attribute, then
 * by format: none (EIFMT_NVAL, 2 bytes of padding), a u16 (EIFMT_HVAL), or a
 * u16 size and that many bytes (EIFMT_SVAL). KPARAM_INFO is an SVAL of 12
 * bytes: u32 index, u16 ordinal, u16 offset, u32 whose top 14 bits are the
 * size. Checked against cuobjdump -elf on CUDA 13.0 (tests/data/kparam/).
 *
 * Images may come from clients: every read is bounds-checked, and anything
 * out of shape ends the walk of that image or section, never more. */
#ifndef FLEXGV_CUBIN_H
#define FLEXGV_CUBIN_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FG_KPARAM_MAX 1024 /* parameters of one kernel, at most */

/* Called for each kernel with a layout: its name (not NUL-terminated, len
 * bytes) and its parameters' offsets and sizes by ordinal. */
typedef void (*fg_kparam_each)(void *ctx, const char *name, size_t len, unsigned count, const unsigned *offsets,
                               const unsigned *sizes);

static inline uint64_t fg_cubin_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#define FG_FATBIN_MAGIC 0xba55ed50u
#define FG_FATBIN_ELF 2
#define FG_FATBIN_COMPRESSED 0xa000u /* flags an entry compressed (0x2000 before CUDA 13, 0x8000 since) */
#define FG_EIFMT_NVAL 1
#define FG_EIFMT_HVAL 3
#define FG_EIFMT_SVAL 4
#define FG_EIATTR_KPARAM_INFO 0x17
#define FG_EIATTR_CBANK_PARAM_SIZE 0x19

/* One kernel's section: its parameters' sizes by ordinal; 0 unless the
 * records give ordinals 0..n-1 once each (none: no parameters, if the
 * parameter bank's size, when given, says so too). */
static inline int fg_cubin_kernel(const uint8_t *s, uint64_t n, unsigned *offsets, unsigned *sizes, unsigned *count)
{
    unsigned seen = 0;
    uint64_t bank = 0;
    for (uint64_t at = 0; at + 4 <= n;) {
        unsigned fmt = s[at], attr = s[at + 1];
        uint64_t len = fmt == FG_EIFMT_SVAL ? fg_cubin_le(s + at + 2, 2) : 0;
        if ((fmt != FG_EIFMT_NVAL && fmt != FG_EIFMT_HVAL && fmt != FG_EIFMT_SVAL) || len > n - at - 4)
            return 0;
        if (fmt == FG_EIFMT_HVAL && attr == FG_EIATTR_CBANK_PARAM_SIZE)
            bank = fg_cubin_le(s + at + 2, 2);
        if (fmt == FG_EIFMT_SVAL && attr == FG_EIATTR_KPARAM_INFO) {
            if (len != 12)
                return 0;
            unsigned ord = (unsigned)fg_cubin_le(s + at + 8, 2), off = (unsigned)fg_cubin_le(s + at + 10, 2);
            unsigned size = (unsigned)(fg_cubin_le(s + at + 12, 4) >> 18);
            if (ord >= FG_KPARAM_MAX || size == 0 || (ord < seen && sizes[ord]))
                return 0;
            for (; seen <= ord; seen++)
                sizes[seen] = 0;
            sizes[ord] = size;
            offsets[ord] = off;
        }
        at += 4 + len;
    }
    for (unsigned i = 0; i < seen; i++)
        if (!sizes[i])
            return 0;
    if (!seen && bank)
        return 0;
    *count = seen;
    return 1;
}

/* A 64-bit little-endian ELF image's section table, checked to lie
 * inside the image. */
struct fg_elf {
    const uint8_t *p;
    uint64_t n, shoff, shentsize, shnum, stroff, strsize;
};

static inline int fg_elf_open(struct fg_elf *e, const uint8_t *p, uint64_t n)
{
    if (n < 64 || memcmp(p, "\177ELF", 4) != 0 || p[4] != 2 || p[5] != 1)
        return 0;
    e->p = p;
    e->n = n;
    e->shoff = fg_cubin_le(p + 0x28, 8), e->shentsize = fg_cubin_le(p + 0x3a, 2);
    e->shnum = fg_cubin_le(p + 0x3c, 2);
    uint64_t shstrndx = fg_cubin_le(p + 0x3e, 2);
    if (e->shentsize < 64 || shstrndx >= e->shnum || e->shoff > n || e->shnum > (n - e->shoff) / e->shentsize)
        return 0;
    const uint8_t *strs = p + e->shoff + shstrndx * e->shentsize;
    e->stroff = fg_cubin_le(strs + 24, 8), e->strsize = fg_cubin_le(strs + 32, 8);
    return e->stroff <= n && e->strsize <= n - e->stroff;
}

/* Section i's name, its length, and the section's offset and size (not
 * checked against the image: a section without file contents has none);
 * 0 when its name does not end inside the string table. */
static inline int fg_elf_section(const struct fg_elf *e, uint64_t i, const char **nm, size_t *len, uint64_t *off,
                                 uint64_t *size)
{
    const uint8_t *sh = e->p + e->shoff + i * e->shentsize;
    uint64_t name = fg_cubin_le(sh, 4);
    *off = fg_cubin_le(sh + 24, 8), *size = fg_cubin_le(sh + 32, 8);
    if (name >= e->strsize)
        return 0;
    *nm = (const char *)e->p + e->stroff + name;
    size_t left = (size_t)(e->strsize - name);
    *len = strnlen(*nm, left);
    return *len < left;
}

/* An ELF cubin's kernels; the number found. */
static inline unsigned fg_cubin_elf(const uint8_t *p, uint64_t n, fg_kparam_each each, void *ctx)
{
    struct fg_elf e;
    if (!fg_elf_open(&e, p, n))
        return 0;
    static const char prefix[] = ".nv.info.";
    unsigned found = 0;
    for (uint64_t i = 0; i < e.shnum; i++) {
        const char *nm;
        size_t len;
        uint64_t off, size;
        if (!fg_elf_section(&e, i, &nm, &len, &off, &size) || off > n || size > n - off)
            continue;
        if (len <= sizeof prefix - 1 || memcmp(nm, prefix, sizeof prefix - 1) != 0)
            continue;
        unsigned offsets[FG_KPARAM_MAX], sizes[FG_KPARAM_MAX], count = 0;
        if (fg_cubin_kernel(p + off, size, offsets, sizes, &count)) {
            each(ctx, nm + sizeof prefix - 1, len - (sizeof prefix - 1), count, offsets, sizes);
            found++;
        }
    }
    return found;
}

/* The size of an ELF cubin or a fatbinary by its headers (trusted: the
 * image is the program's own); 0 if it is neither. */
static inline uint64_t fg_cubin_size(const void *image)
{
    const uint8_t *p = image;
    if (fg_cubin_le(p, 4) == FG_FATBIN_MAGIC)
        return fg_cubin_le(p + 6, 2) + fg_cubin_le(p + 8, 8);
    if (memcmp(p, "\177ELF", 4) != 0 || p[4] != 2)
        return 0;
    uint64_t ph = fg_cubin_le(p + 0x20, 8) + fg_cubin_le(p + 0x36, 2) * fg_cubin_le(p + 0x38, 2);
    uint64_t sh = fg_cubin_le(p + 0x28, 8) + fg_cubin_le(p + 0x3a, 2) * fg_cubin_le(p + 0x3c, 2);
    return ph > sh ? ph : sh;
}

/* Decompresses n bytes at src into exactly want bytes at dst: 0 when done. */
typedef int (*fg_cubin_inflate)(void *dst, uint64_t want, const void *src, uint64_t n);

/* How a fatbinary is walked: its compressed entries decompressed by
 * inflate (NULL: passed over), at most *budget bytes in all (decremented;
 * NULL: no bound) and FG_CUBIN_ENTRY_MAX each; only the cubins a device of
 * compute capability arch (major * 10 + minor; 0: any) runs: its major,
 * no later minor. */
struct fg_cubin_opts {
    fg_cubin_inflate inflate;
    uint64_t *budget;
    unsigned arch;
};
#define FG_CUBIN_ENTRY_MAX (256ull << 20)
#define FG_ZSTD_MAGIC 0xfd2fb528u

/* A zstd frame (what nvcc 13 compresses with), by libzstd.so.1 when the
 * machine has it: -1 otherwise, or when the frame is not exactly want
 * bytes. */
static inline int fg_cubin_zstd(void *dst, uint64_t want, const void *src, uint64_t n)
{
    static size_t (*decompress)(void *, size_t, const void *, size_t);
    static unsigned (*is_error)(size_t);
    static int tried;
    if (!__atomic_exchange_n(&tried, 1, __ATOMIC_ACQ_REL)) {
        void *z = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
        if (z) {
            *(void **)&is_error = dlsym(z, "ZSTD_isError");
            __atomic_store_n((void **)&decompress, dlsym(z, "ZSTD_decompress"), __ATOMIC_RELEASE);
        }
    }
    size_t (*f)(void *, size_t, const void *, size_t) = __atomic_load_n((void **)&decompress, __ATOMIC_ACQUIRE);
    if (!f || !is_error || n < 4 || fg_cubin_le(src, 4) != FG_ZSTD_MAGIC)
        return -1;
    size_t r = f(dst, (size_t)want, src, (size_t)n);
    return is_error(r) || r != want ? -1 : 0;
}

/* Calls fn on an ELF cubin, or on each cubin of a fatbinary that o lets
 * through, of n bytes. */
typedef void (*fg_cubin_elf_fn)(void *ctx, const uint8_t *elf, uint64_t n);

static inline void fg_cubin_walk(const void *image, uint64_t n, fg_cubin_elf_fn fn, void *ctx,
                                 const struct fg_cubin_opts *o)
{
    const uint8_t *p = image;
    if (!p)
        return;
    if (n < 16 || fg_cubin_le(p, 4) != FG_FATBIN_MAGIC) {
        fn(ctx, p, n);
        return;
    }
    uint64_t hdr = fg_cubin_le(p + 6, 2), body = fg_cubin_le(p + 8, 8);
    if (hdr < 16 || hdr > n || body > n - hdr)
        return;
    for (uint64_t at = hdr; at + 64 <= hdr + body;) {
        const uint8_t *e = p + at;
        uint64_t kind = fg_cubin_le(e, 2), ehdr = fg_cubin_le(e + 4, 4), size = fg_cubin_le(e + 8, 8);
        uint64_t packed = fg_cubin_le(e + 16, 4), arch = fg_cubin_le(e + 28, 4), flags = fg_cubin_le(e + 40, 8);
        uint64_t want = fg_cubin_le(e + 56, 8);
        if (ehdr < 64 || ehdr > hdr + body - at || size > hdr + body - at - ehdr)
            break;
        at += ehdr + size;
        if (kind != FG_FATBIN_ELF || (o && o->arch && (arch / 10 != o->arch / 10 || arch % 10 > o->arch % 10)))
            continue;
        if (!(flags & FG_FATBIN_COMPRESSED)) {
            fn(ctx, e + ehdr, size);
            continue;
        }
        if (!o || !o->inflate || packed == 0 || packed > size || want == 0 || want > FG_CUBIN_ENTRY_MAX ||
            (o->budget && want > *o->budget))
            continue;
        uint8_t *elf = malloc((size_t)want);
        if (!elf)
            continue;
        if (o->budget)
            *o->budget -= want;
        if (o->inflate(elf, want, e + ehdr, packed) == 0)
            fn(ctx, elf, want);
        free(elf);
    }
}

struct fg_cubin_kernels_walk {
    fg_kparam_each each;
    void *ctx;
    unsigned found;
};

static inline void fg_cubin_kernels_elf(void *ctx, const uint8_t *elf, uint64_t n)
{
    struct fg_cubin_kernels_walk *w = ctx;
    w->found += fg_cubin_elf(elf, n, w->each, w->ctx);
}

/* Walks an ELF cubin or a fatbinary of n bytes; returns the kernels found. */
static inline unsigned fg_cubin_kernels_opt(const void *image, uint64_t n, fg_kparam_each each, void *ctx,
                                            const struct fg_cubin_opts *o)
{
    struct fg_cubin_kernels_walk w = {each, ctx, 0};
    fg_cubin_walk(image, n, fg_cubin_kernels_elf, &w, o);
    return w.found;
}

/* Module-wide device data an ELF cubin asks the driver for at load: its
 * globals (.nv.global, which takes no room in the file, and
 * .nv.global.init) and its constant banks other than kernel parameters
 * (.nv.constant0.*); 0 if it is not an ELF cubin. */
static inline uint64_t fg_cubin_elf_data(const uint8_t *p, uint64_t n)
{
    struct fg_elf e;
    if (!fg_elf_open(&e, p, n))
        return 0;
    uint64_t total = 0;
    for (uint64_t i = 0; i < e.shnum; i++) {
        const char *nm;
        size_t len;
        uint64_t off, size;
        if (!fg_elf_section(&e, i, &nm, &len, &off, &size))
            continue;
        int global = !strcmp(nm, ".nv.global") || !strcmp(nm, ".nv.global.init");
        int bank = len > 12 && !memcmp(nm, ".nv.constant", 12) && memcmp(nm, ".nv.constant0", 13) != 0;
        if ((global || bank) && total + size >= total)
            total += size;
    }
    return total;
}

static inline void fg_cubin_data_elf(void *ctx, const uint8_t *elf, uint64_t n)
{
    uint64_t *most = ctx, d = fg_cubin_elf_data(elf, n);
    if (d > *most)
        *most = d; /* of a fatbinary's cubins, one loads */
}

/* The module-wide data of an ELF cubin or a fatbinary (its largest cubin
 * that o lets through). */
static inline uint64_t fg_cubin_data(const void *image, uint64_t n, const struct fg_cubin_opts *o)
{
    uint64_t most = 0;
    fg_cubin_walk(image, n, fg_cubin_data_elf, &most, o);
    return most;
}

static inline unsigned fg_cubin_kernels(const void *image, uint64_t n, fg_kparam_each each, void *ctx)
{
    return fg_cubin_kernels_opt(image, n, each, ctx, NULL);
}

#endif
