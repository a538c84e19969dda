/* Export-table census (FLEXGV_CENSUS=PREFIX): which private tables of the
 * driver (cuGetExportTable) a process is handed, what their slots hold and
 * how often it calls each of their functions. At exit it writes
 * PREFIX.PID.census, read by internal/census.
 *
 * A table is patched in place the first time it is handed out, before that
 * caller or any racing one gets it back: the runtime's integrity check
 * hashes table addresses, so a copy would be noticed. Every slot that points
 * into the driver's code gets a trampoline of its own, which counts and
 * tail-jumps to the original with every register and the stack as the
 * caller left them; data slots stay. Slots named in FLEXGV_CENSUS_SKIP
 * (UUID/SLOT,...; "none"; default: the integrity check's function, whose
 * slot value is hashed too) are left alone. Tables are classified and patched
 * under one lock, never held across a driver call. */
#include "shim.h"
#include "flexgv/cuda_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NSTUBS 2048
#define STUB_BYTES 32 /* .p2align 5 below */
#define MAX_TABLES 64
#define MAX_SLOTS 256   /* looked at in one table */
#define SCAN_SLOTS 128  /* without a size word: leading code pointers, at most */
#define POOL_SLOTS 4096 /* over all tables */
#define MAX_REFUSED 32
#define MAX_SKIP 16
#define MAX_MAPS 16
#define STR_(x) #x
#define STR(x) STR_(x)

/* Trampoline k: count, then jump to the original (both indexed by k). */
uint64_t fg_census_counts[NSTUBS];
void *fg_census_orig[NSTUBS];
extern const char fg_census_stubs[] __attribute__((visibility("hidden")));
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl fg_census_stubs\n"
        ".hidden fg_census_stubs\n"
        ".type fg_census_stubs, @function\n"
        ".p2align 5\n"
        "fg_census_stubs:\n"
        ".set fg_census_k, 0\n"
        ".rept " STR(NSTUBS) "\n"
        ".p2align 5\n"
        "\tendbr64\n"
        "\tlock incq fg_census_counts+8*fg_census_k(%rip)\n"
        "\tjmp *fg_census_orig+8*fg_census_k(%rip)\n"
        ".set fg_census_k, fg_census_k+1\n"
        ".endr\n"
        ".size fg_census_stubs, .-fg_census_stubs\n");
#else
#error "the census trampolines need a port to this architecture"
#endif

/* What a slot holds: a trampoline index (a counted function), or one of these. */
enum { K_SIZE = -1, K_DATA = -2, K_SKIP = -3, K_UNCOUNTED = -4 };

struct slot {
    uintptr_t value; /* as the driver set it */
    int kind;
};

struct table {
    CUuuid uuid;
    uintptr_t addr;
    int alias; /* the table first handed out at this address, or -1 */
    int sized;
    int nslots;
    struct slot *slot;
    uint64_t requests;
    char error[128]; /* why some of its functions are not counted */
};

struct refusal {
    CUuuid uuid;
    int result;
    uint64_t requests;
};

static const char *prefix;
static int spin;
static struct table tables[MAX_TABLES];
static int ntables;
static struct slot pool[POOL_SLOTS];
static int pool_used, stubs_used;
static struct refusal refused[MAX_REFUSED];
static int nrefused;
static struct {
    CUuuid uuid;
    int slot;
} skip[MAX_SKIP];
static int nskip;
static struct {
    uintptr_t lo, hi;
} code[MAX_MAPS];
static int ncode;
static const char *driver_path;
static int warned_full, warned_skip, warned_write;

extern char *program_invocation_short_name;

static void lock(void)
{
    while (__atomic_exchange_n(&spin, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&spin, __ATOMIC_RELAXED))
            sched_yield();
}

static void unlock(void) { __atomic_store_n(&spin, 0, __ATOMIC_RELEASE); }

/* UUIDs are written as their bytes in memory order, 8-4-4-4-12. */
static void uuid_text(const CUuuid *u, char out[37])
{
    char gpu[41];
    fg_uuid_text(u, gpu, sizeof gpu);
    memcpy(out, gpu + 4, 37); /* without "GPU-" */
}

/* One UUID/SLOT entry of n characters. */
static int parse_skip_entry(const char *e, size_t n)
{
    CUuuid *u = &skip[nskip].uuid;
    int digits = 0;
    size_t i = 0;
    for (; i < n && e[i] != '/'; i++) {
        const char *hex = "0123456789abcdef", *d = e[i] ? strchr(hex, e[i] | 0x20) : NULL;
        if (e[i] == '-')
            continue;
        if (!d || digits == 32)
            return -1;
        int v = (int)(d - hex);
        u->bytes[digits / 2] = (char)(digits % 2 ? (unsigned char)u->bytes[digits / 2] | v : v << 4);
        digits++;
    }
    if (digits != 32 || i + 1 >= n)
        return -1;
    int slot = 0;
    for (i++; i < n; i++) {
        if (e[i] < '0' || e[i] > '9')
            return -1;
        slot = slot * 10 + (e[i] - '0');
        if (slot >= MAX_SLOTS)
            return -1;
    }
    skip[nskip++].slot = slot;
    return 0;
}

/* Public reverse engineering of the runtime's integrity check: it hashes the
 * address of this table and the value of its slot 1. */
static const char default_skip[] = "d4082055-bde6-704b-8d34-ba123c66e1f2/1";

static void parse_skip(const char *list)
{
    if (strcmp(list, "none") == 0)
        return;
    for (const char *p = list; *p && nskip < MAX_SKIP;) {
        size_t n = strcspn(p, ",");
        if (parse_skip_entry(p, n)) {
            fg_warn_once(&warned_skip, "FLEXGV_CENSUS_SKIP: cannot read %.*s (want UUID/SLOT,... or none)", (int)n, p);
            return;
        }
        p += n + (p[n] == ',');
    }
}

static int skipped(const CUuuid *u, int slot)
{
    for (int i = 0; i < nskip; i++)
        if (skip[i].slot == slot && memcmp(&skip[i].uuid, u, sizeof *u) == 0)
            return 1;
    return 0;
}

/* The executable segments of the object holding fn: the driver's code. */
static int find_driver(struct dl_phdr_info *info, size_t size, void *fn)
{
    (void)size;
    int n = 0, hit = 0;
    for (int i = 0; i < info->dlpi_phnum && n < MAX_MAPS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        hit |= (uintptr_t)fn >= lo && (uintptr_t)fn < hi;
        code[n].lo = lo; /* kept (ncode) only if this is the driver */
        code[n].hi = hi;
        n++;
    }
    if (hit) {
        ncode = n;
        driver_path = info->dlpi_name;
    }
    return hit; /* stops the iteration */
}

static int is_code(uintptr_t v)
{
    for (int i = 0; i < ncode; i++)
        if (v >= code[i].lo && v < code[i].hi)
            return 1;
    return 0;
}

static int stub_of(uintptr_t v)
{
    uintptr_t base = (uintptr_t)fg_census_stubs;
    if (v < base || v >= base + (uintptr_t)NSTUBS * STUB_BYTES || (v - base) % STUB_BYTES)
        return -1;
    return (int)((v - base) / STUB_BYTES);
}

/* What the driver had put where a trampoline of ours may now be. */
static uintptr_t original(uintptr_t v)
{
    int k = stub_of(v);
    return k < 0 ? v : (uintptr_t)fg_census_orig[k];
}

struct mapping {
    uintptr_t lo, hi;
    int prot;
};

/* The mappings overlapping [lo, hi), in address order. */
static int read_maps(uintptr_t lo, uintptr_t hi, struct mapping *out)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return 0;
    char line[256];
    int n = 0, at_start = 1;
    while (n < MAX_MAPS && fgets(line, sizeof line, f)) {
        int start = at_start;
        at_start = strchr(line, '\n') != NULL; /* a long line comes in pieces */
        unsigned long a, b;
        char perms[5];
        if (!start || sscanf(line, "%lx-%lx %4s", &a, &b, perms) != 3 || b <= lo || a >= hi)
            continue;
        out[n].lo = a;
        out[n].hi = b;
        out[n].prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                      (perms[2] == 'x' ? PROT_EXEC : 0);
        n++;
    }
    fclose(f);
    return n;
}

static void set_error(struct table *t, const char *what, int err)
{
    snprintf(t->error, sizeof t->error, "%s%s%s", what, err ? ": " : "", err ? strerror(err) : "");
}

/* Puts the trampolines of t's new function slots in place, with the pages
 * made writable for the time it takes. */
static void write_slots(struct table *t, const struct mapping *m, int nm)
{
    uintptr_t lo = t->addr, hi = t->addr + (uintptr_t)t->nslots * sizeof(void *);
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from[MAX_MAPS], to[MAX_MAPS];
    int opened[MAX_MAPS] = {0}, err = 0;
    for (int i = 0; i < nm && !err; i++) {
        if (m[i].hi <= lo || m[i].lo >= hi || (m[i].prot & PROT_WRITE))
            continue;
        from[i] = (m[i].lo > lo ? m[i].lo : lo) & ~(page - 1);
        to[i] = ((m[i].hi < hi ? m[i].hi : hi) + page - 1) & ~(page - 1);
        if (mprotect((void *)from[i], to[i] - from[i], m[i].prot | PROT_WRITE))
            err = errno;
        else
            opened[i] = 1;
    }
    uintptr_t *w = (uintptr_t *)t->addr;
    for (int i = 0; i < t->nslots; i++) {
        struct slot *s = &t->slot[i];
        if (s->kind < 0 || stub_of(w[i]) >= 0)
            continue;
        if (err)
            s->kind = K_UNCOUNTED;
        else /* fg_census_orig[kind] is set: release orders it before the slot */
            __atomic_store_n(&w[i], (uintptr_t)fg_census_stubs + (uintptr_t)s->kind * STUB_BYTES, __ATOMIC_RELEASE);
    }
    if (err)
        set_error(t, "mprotect", err);
    for (int i = 0; i < nm; i++)
        if (opened[i])
            mprotect((void *)from[i], to[i] - from[i], m[i].prot);
}

/* Finds t's slots (its size word, else its leading code pointers) and
 * gives each function slot a trampoline. */
static void patch(struct table *t)
{
    struct mapping m[MAX_MAPS];
    uintptr_t span = (uintptr_t)MAX_SLOTS * sizeof(void *);
    int nm = read_maps(t->addr, t->addr + span, m);
    uintptr_t end = t->addr; /* of the readable memory from the table on */
    for (int i = 0; i < nm && m[i].lo <= end && (m[i].prot & PROT_READ); i++)
        end = m[i].hi;
    int max = (int)((end - t->addr < span ? end - t->addr : span) / sizeof(void *));
    const uintptr_t *w = (const uintptr_t *)t->addr;
    if (max == 0) {
        set_error(t, "not readable", 0);
        return;
    }
    int n = 0;
    if (w[0] && w[0] % sizeof(void *) == 0 && w[0] < 65536) {
        t->sized = 1;
        n = (int)(w[0] / sizeof(void *));
        if (n > max) {
            set_error(t, "size word beyond the readable memory or the slots looked at", 0);
            n = max;
        }
    } else {
        while (n < max && n < SCAN_SLOTS && is_code(original(w[n])))
            n++;
        if (n == 0)
            set_error(t, "neither a size word nor code at slot 0", 0);
    }
    if (n > POOL_SLOTS - pool_used) {
        set_error(t, "too many slots over all tables", 0);
        n = POOL_SLOTS - pool_used;
    }
    /* A table scanned for its length may have run into this one. */
    for (int i = 0; i < ntables; i++) {
        struct table *o = &tables[i];
        if (!o->sized && o->alias < 0 && o->addr < t->addr && t->addr < o->addr + (uintptr_t)o->nslots * sizeof(void *))
            o->nslots = (int)((t->addr - o->addr) / sizeof(void *));
    }
    t->slot = &pool[pool_used];
    t->nslots = n;
    pool_used += n;
    int fresh = 0;
    for (int i = 0; i < n; i++) {
        struct slot *s = &t->slot[i];
        uintptr_t v = w[i];
        s->value = original(v);
        if (i == 0 && t->sized)
            s->kind = K_SIZE;
        else if (stub_of(v) >= 0)
            s->kind = stub_of(v); /* already given one as part of another table */
        else if (!is_code(v))
            s->kind = K_DATA;
        else if (skipped(&t->uuid, i))
            s->kind = K_SKIP;
        else if (stubs_used == NSTUBS) {
            s->kind = K_UNCOUNTED;
            set_error(t, "out of trampolines", 0);
        } else {
            s->kind = stubs_used++;
            fg_census_orig[s->kind] = (void *)v;
            fresh++;
        }
    }
    if (fresh)
        write_slots(t, m, nm);
}

static void seen(const CUuuid *id, uintptr_t addr, void *real)
{
    lock();
    if (!ncode)
        dl_iterate_phdr(find_driver, real);
    struct table *t = NULL;
    int same = -1;
    for (int i = 0; i < ntables; i++) {
        if (tables[i].addr != addr)
            continue;
        if (memcmp(&tables[i].uuid, id, sizeof *id) == 0)
            t = &tables[i];
        else if (tables[i].alias < 0)
            same = i;
    }
    if (!t && ntables < MAX_TABLES) {
        t = &tables[ntables++];
        t->uuid = *id;
        t->addr = addr;
        t->alias = same;
        if (same < 0)
            patch(t);
    }
    if (t)
        t->requests++;
    unlock();
    if (!t)
        fg_warn_once(&warned_full, "census: more than %d export tables; the others are not counted", MAX_TABLES);
}

static void seen_refusal(const CUuuid *id, CUresult r)
{
    lock();
    struct refusal *f = NULL;
    for (int i = 0; i < nrefused && !f; i++)
        if (refused[i].result == (int)r && memcmp(&refused[i].uuid, id, sizeof *id) == 0)
            f = &refused[i];
    if (!f && nrefused < MAX_REFUSED) {
        f = &refused[nrefused++];
        f->uuid = *id;
        f->result = (int)r;
    }
    if (f)
        f->requests++;
    unlock();
}

CUresult fg_census_cuGetExportTable(fg_real_cuGetExportTable next, const void **ppExportTable,
                                    const CUuuid *pExportTableId)
{
    CUresult r = next(ppExportTable, pExportTableId);
    if (!prefix || !pExportTableId)
        return r;
    if (r == CUDA_SUCCESS && ppExportTable && *ppExportTable)
        seen(pExportTableId, (uintptr_t)*ppExportTable, fg_real_fn(FG_API_cuGetExportTable));
    else
        seen_refusal(pExportTableId, r);
    return r;
}

/* ---- the report ---- */

/* An address as OBJECT+0xOFFSET, or the exported symbol that starts there. */
static void where(uintptr_t a, int symbol, char *buf, size_t n)
{
    Dl_info info;
    if (!dladdr((void *)a, &info) || !info.dli_fname || !*info.dli_fname) {
        snprintf(buf, n, "anon");
        return;
    }
    if (symbol && info.dli_sname && (uintptr_t)info.dli_saddr == a) {
        snprintf(buf, n, "%s", info.dli_sname);
        return;
    }
    const char *base = strrchr(info.dli_fname, '/');
    snprintf(buf, n, "%s+0x%lx", base ? base + 1 : info.dli_fname, (unsigned long)(a - (uintptr_t)info.dli_fbase));
}

static int active(void)
{
    for (int i = 0; i < ntables; i++)
        if (tables[i].requests)
            return 1;
    for (int i = 0; i < nrefused; i++)
        if (refused[i].requests)
            return 1;
    for (int k = 0; k < stubs_used; k++)
        if (__atomic_load_n(&fg_census_counts[k], __ATOMIC_RELAXED))
            return 1;
    return 0;
}

/* The command line, on one line. */
static void cmdline(char *buf, size_t n)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t len = fd < 0 ? -1 : read(fd, buf, n - 1);
    if (fd >= 0)
        close(fd);
    if (len < 0)
        len = 0;
    while (len > 0 && buf[len - 1] == '\0')
        len--;
    for (ssize_t i = 0; i < len; i++)
        if ((unsigned char)buf[i] < ' ')
            buf[i] = ' ';
    buf[len] = '\0';
}

static void write_slot(int fd, const struct slot *s, int i)
{
    char loc[512];
    switch (s->kind) {
    case K_SIZE:
        dprintf(fd, "slot %d size %lu\n", i, (unsigned long)s->value);
        return;
    case K_DATA:
        if (s->value == 0) {
            dprintf(fd, "slot %d data 0\n", i);
        } else if (s->value < 65536) {
            dprintf(fd, "slot %d data int %lu\n", i, (unsigned long)s->value);
        } else {
            where(s->value, 0, loc, sizeof loc);
            dprintf(fd, "slot %d data ptr %s\n", i, loc);
        }
        return;
    }
    where(s->value, 1, loc, sizeof loc);
    if (s->kind >= 0)
        dprintf(fd, "slot %d fn %lu %s\n", i, (unsigned long)__atomic_load_n(&fg_census_counts[s->kind], __ATOMIC_RELAXED),
                loc);
    else
        dprintf(fd, "slot %d %s %s\n", i, s->kind == K_SKIP ? "skip" : "uncounted", loc);
}

static void write_report(void)
{
    if (!active())
        return;
    lock();
    char path[PATH_MAX], text[37], other[37], loc[512], cmd[1024];
    int fd = -1, pid = (int)getpid();
    for (int i = 0; i < 100 && fd < 0; i++) {
        if (i == 0)
            snprintf(path, sizeof path, "%s.%d.census", prefix, pid);
        else /* the pid of an earlier process */
            snprintf(path, sizeof path, "%s.%d.%d.census", prefix, pid, i);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        unlock();
        fg_warn_once(&warned_write, "census: cannot write %s: %s", path, strerror(errno));
        return;
    }
    cmdline(cmd, sizeof cmd);
    dprintf(fd, "flexgv-census 1\npid %d\nppid %d\ncomm %s\ncmd %s\n", pid, (int)getppid(),
            program_invocation_short_name, cmd);
    if (driver_path && *driver_path)
        dprintf(fd, "driver %s\n", driver_path);
    for (int i = 0; i < ntables; i++) {
        const struct table *t = &tables[i];
        uuid_text(&t->uuid, text);
        where(t->addr, 0, loc, sizeof loc);
        if (t->alias >= 0) {
            uuid_text(&tables[t->alias].uuid, other);
            dprintf(fd, "table %s at %s alias %s requests %lu\n", text, loc, other,
                    (unsigned long)t->requests);
            continue;
        }
        dprintf(fd, "table %s at %s slots %d requests %lu\n", text, loc, t->nslots, (unsigned long)t->requests);
        if (t->error[0])
            dprintf(fd, "error %s\n", t->error);
        for (int s = 0; s < t->nslots; s++)
            write_slot(fd, &t->slot[s], s);
    }
    for (int i = 0; i < nrefused; i++) {
        if (!refused[i].requests)
            continue;
        uuid_text(&refused[i].uuid, text);
        dprintf(fd, "refused %s result %d requests %lu\n", text, refused[i].result,
                (unsigned long)refused[i].requests);
    }
    dprintf(fd, "end\n");
    close(fd);
    unlock();
}

void fg_census_init(const char *path_prefix)
{
    prefix = strdup(path_prefix);
    if (!prefix)
        return;
    const char *list = getenv("FLEXGV_CENSUS_SKIP");
    parse_skip(list ? list : default_skip);
    fg_policy_enable(FG_POLICY_CENSUS);
    atexit(write_report);
}

/* The child counts its own calls and requests from here on. */
void fg_census_after_fork(void)
{
    if (!prefix)
        return;
    spin = 0;
    memset(fg_census_counts, 0, sizeof fg_census_counts);
    for (int i = 0; i < ntables; i++)
        tables[i].requests = 0;
    for (int i = 0; i < nrefused; i++)
        refused[i].requests = 0;
}
