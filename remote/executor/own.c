/* What this connection may name: the handles the driver gave it and the
 * device memory it allocated. A handle or device pointer a client sends is
 * passed to the driver only when it is one of these; anything else (another
 * connection's handle, an address in the executor's own memory) is refused
 * before the driver sees it. Each entry may have an owner (the context it
 * was made in, the module a function came from): destroying the owner drops
 * it too, as the driver frees it. */
#include "executor.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

uint64_t fgr_ctx;
uint64_t fgr_generation;
const char *fgr_peer = "client";

struct ent {
    uint64_t v, owner;
    struct fgr_link *made; /* the kept requests that made or changed it (journal.c) */
    uint32_t refs; /* references beyond the first (a physical allocation's retains) */
    uint32_t name; /* its index in names (NO_NAME: none) */
    uint8_t kind, okind; /* 0: empty slot; FGR_H_DEAD: removed */
    uint8_t idle;        /* a primary context gone, its handle the device's again once retained */
    uint64_t shadow; /* the name the client gave it (a shadow handle's), which answers give back */
    uint64_t from;   /* an executable graph's: the graph it was instantiated from, while that lives */
};
#define NO_NAME UINT32_MAX
#define FGR_H_DEAD 0xff

static struct ent *tab;
static size_t cap, used; /* used counts removed slots too, until a rehash */

struct range {
    uint64_t base, end, owner;
    uint8_t okind;
    uint8_t kept; /* a graph allocation node's: a free leaves it, its owner's end drops it */
};
static struct range *mem;
static size_t nmem, capmem;

/* What the client sees of a handle is its name, never the driver's value
 * (for most kinds an address in this process's heap): an index into names,
 * the generation of that index (a name outlives its handle only as a stale
 * one) and the kind, enciphered with a key of this executor's. A name thus
 * tells nothing of the executor's layout, and a value the client makes up,
 * keeps past its handle's end or brings from another connection (another
 * executor, another key) deciphers to no live name: it is refused, never
 * given to the driver. */
struct name {
    uint64_t v; /* the driver's handle */
    uint32_t gen;
    uint8_t kind; /* 0: free */
};
static struct name *names;
static uint32_t nnames, capnames, freed = NO_NAME; /* freed: a free index, chained through v */
static uint32_t key[4];

/* A permutation of 42-bit values keyed by key: four Feistel rounds over
 * 21-bit halves, each a multiply-xorshift mix of one half with a round
 * key. What it enciphers holds no address, so it hides nothing but which
 * index a name is; it makes names of different executors unrelated and a
 * made-up one fail to decipher. */
#define HALF_BITS 21
#define HALF_MASK ((1u << HALF_BITS) - 1)

static uint32_t round_fn(uint32_t x, uint32_t k)
{
    uint64_t h = ((uint64_t)x << 32 | k) ^ ((uint64_t)k << 29);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return (uint32_t)(h >> 32) & HALF_MASK;
}

/* Random; the fuzzers link a fixed key instead, so that the requests they
 * start from name handles their executor gave. */
__attribute__((weak)) int fgr_names_new_key(uint32_t k[4])
{
    return getrandom(k, 4 * sizeof k[0], 0) == (ssize_t)(4 * sizeof k[0]) ? 0 : -1;
}

static void keyed(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    if (fgr_names_new_key(key) != 0) {
        /* No entropy: names still hold no address; they only become
         * guessable across executors, each of which still checks its own. */
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        for (int i = 0; i < 4; i++)
            key[i] = round_fn((uint32_t)t.tv_nsec + (uint32_t)i, (uint32_t)getpid() ^ (uint32_t)t.tv_sec);
    }
}

static uint64_t encipher(uint64_t x)
{
    uint32_t l = (uint32_t)(x >> HALF_BITS) & HALF_MASK, r = (uint32_t)x & HALF_MASK;
    for (int i = 0; i < 4; i++) {
        uint32_t t = l ^ round_fn(r, key[i]);
        l = r;
        r = t;
    }
    return (uint64_t)l << HALF_BITS | r;
}

static uint64_t decipher(uint64_t x)
{
    uint32_t l = (uint32_t)(x >> HALF_BITS) & HALF_MASK, r = (uint32_t)x & HALF_MASK;
    for (int i = 3; i >= 0; i--) {
        uint32_t t = r ^ round_fn(l, key[i]);
        r = l;
        l = t;
    }
    return (uint64_t)l << HALF_BITS | r;
}

/* A name enciphers the kind (5 bits), the generation (13) and the index
 * (24), and is 16-byte aligned below 2^46: a pointer-like value that is no
 * shadow handle (wire.h). */
#define GEN_BITS 13
#define GEN_MASK ((1u << GEN_BITS) - 1)
#define INDEX_BITS 24
#define MAX_NAMES (1u << INDEX_BITS)
_Static_assert(FGR_H_MEM < 32, "a kind fits 5 bits");

static uint64_t name_value(uint32_t i)
{
    return encipher((uint64_t)names[i].kind << (GEN_BITS + INDEX_BITS) |
                    (uint64_t)(names[i].gen & GEN_MASK) << INDEX_BITS | i)
           << 4;
}

/* A value the client could not tell from one of its own: NULL, the special
 * streams, a shadow handle's name. */
static int reserved(uint64_t v) { return v <= 2 || fgr_is_shadow(v); }

/* A fresh name for the driver's handle v of kind, NO_NAME when out of
 * memory. */
/* The slot for forced name i (a new executor making a moved state again),
 * NO_NAME when it is taken or beyond what can be held. */
static uint32_t name_place(uint32_t i)
{
    if (i >= MAX_NAMES)
        return NO_NAME;
    if (i < nnames)
        return names[i].kind ? NO_NAME : i;
    if (i >= capnames) {
        uint32_t n = capnames ? capnames : 256;
        while (n <= i)
            n *= 2;
        struct name *m = realloc(names, n * sizeof *m);
        if (!m)
            return NO_NAME;
        names = m;
        capnames = n;
    }
    for (uint32_t k = nnames; k <= i; k++)
        names[k] = (struct name){0, 0, 0}; /* free; chained by fgr_names_restore */
    nnames = i + 1;
    return i;
}

static uint32_t name_new(int kind, uint64_t v)
{
    keyed();
    uint32_t i, gen;
    if (fgr_journal_forced(&i, &gen)) {
        if ((i = name_place(i)) == NO_NAME) {
            fgr_journal_misplaced();
            return NO_NAME;
        }
        names[i] = (struct name){v, gen & GEN_MASK, (uint8_t)kind};
        fgr_journal_named(i, names[i].gen);
        return i;
    }
    i = freed;
    if (i != NO_NAME) {
        freed = (uint32_t)names[i].v;
    } else {
        if (nnames == MAX_NAMES)
            return NO_NAME;
        if (nnames == capnames) {
            uint32_t n = capnames ? 2 * capnames : 256;
            struct name *m = n > capnames && n <= MAX_NAMES ? realloc(names, n * sizeof *m) : NULL;
            if (!m)
                return NO_NAME;
            names = m;
            capnames = n;
        }
        i = nnames++;
        names[i].gen = 0;
    }
    names[i].v = v;
    names[i].kind = (uint8_t)kind;
    /* A generation whose name would read as reserved is skipped. */
    do
        names[i].gen = (names[i].gen + 1) & GEN_MASK;
    while (reserved(name_value(i)));
    fgr_journal_named(i, names[i].gen);
    fgr_generation++;
    return i;
}

void fgr_names_key(uint32_t k[4], int set)
{
    keyed();
    if (set)
        memcpy(key, k, sizeof key);
    else
        memcpy(k, key, sizeof key);
}

int fgr_names_fresh(void) { return nnames == 0; }

#define FREE_BIT 0x80000000u

static void gone_save(struct fgr_buf *w);
static const char *gone_restore(struct fgr_rd *rd);

void fgr_names_save(struct fgr_buf *w)
{
    fgr_put_u32(w, nnames);
    for (uint32_t i = 0; i < nnames; i++)
        fgr_put_u32(w, (names[i].gen & GEN_MASK) | (names[i].kind ? 0 : FREE_BIT));
    uint32_t n = 0;
    for (uint32_t i = freed; i != NO_NAME && n <= nnames; i = (uint32_t)names[i].v)
        n++;
    fgr_put_u32(w, n);
    for (uint32_t i = freed, k = 0; k < n; i = (uint32_t)names[i].v, k++)
        fgr_put_u32(w, i);
    gone_save(w);
}

const char *fgr_names_restore(struct fgr_rd *rd)
{
    uint32_t n = fgr_get_u32(rd);
    if (rd->bad || n > MAX_NAMES || n > rd->left / 4)
        return "the state's names are malformed";
    if (n < nnames)
        return "the state's names do not cover what was made again";
    if (n > nnames && name_place(n - 1) == NO_NAME)
        return "no memory for the state's names";
    for (uint32_t i = 0; i < n; i++) {
        uint32_t g = fgr_get_u32(rd);
        if (!(g & FREE_BIT) != !!names[i].kind)
            return "the state's names do not match what was made again";
        names[i].gen = g & GEN_MASK;
    }
    /* The free names in the order the old executor would have reused them,
     * so that this one mints the names it would have: each free one once. */
    uint32_t nfree = fgr_get_u32(rd), nfreed = 0;
    for (uint32_t i = 0; i < n; i++)
        nfreed += !names[i].kind;
    const uint8_t *order = nfree == nfreed && nfree <= rd->left / 4 ? fgr_get_bytes(rd, (uint64_t)nfree * 4) : NULL;
    if (rd->bad || (nfree && !order) || nfree != nfreed)
        return "the state's names are malformed";
    freed = NO_NAME;
    for (uint32_t i = 0; i < n; i++)
        if (!names[i].kind)
            names[i].v = NO_NAME - 1; /* not chained yet */
    for (uint32_t k = nfree; k-- > 0;) {
        uint32_t i = (uint32_t)order[4 * k] | (uint32_t)order[4 * k + 1] << 8 | (uint32_t)order[4 * k + 2] << 16 |
                     (uint32_t)order[4 * k + 3] << 24;
        if (i >= n || names[i].kind || names[i].v != NO_NAME - 1)
            return "the state's names are malformed";
        names[i].v = freed;
        freed = i;
    }
    return rd->bad ? "the state's names are malformed" : gone_restore(rd);
}

static void name_free(uint32_t i)
{
    fgr_generation++;
    if (i == NO_NAME)
        return;
    names[i].kind = 0;
    names[i].v = freed;
    freed = i;
}

static size_t slot_of(int kind, uint64_t v)
{
    uint64_t h = (v ^ (uint64_t)kind * 0x9e3779b97f4a7c15ULL) * 0xff51afd7ed558ccdULL;
    return (size_t)(h >> 17) & (cap - 1);
}

static struct ent *find(int kind, uint64_t v)
{
    if (!cap)
        return NULL;
    for (size_t i = slot_of(kind, v);; i = (i + 1) & (cap - 1)) {
        if (!tab[i].kind)
            return NULL;
        if (tab[i].kind == kind && tab[i].v == v)
            return &tab[i];
    }
}

/* Rehashes without the removed entries: twice as large when at least half
 * of what is used is live, else the same size (a client that creates and
 * destroys events in a loop does not grow the table). */
static int grow(void)
{
    size_t live = 0;
    for (size_t i = 0; i < cap; i++)
        live += tab[i].kind && tab[i].kind != FGR_H_DEAD;
    size_t ncap = !cap ? 256 : live * 2 >= used ? cap * 2 : cap;
    struct ent *n = calloc(ncap, sizeof *n), *old = tab;
    if (!n)
        return -1;
    size_t ocap = cap;
    tab = n;
    cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i].kind || old[i].kind == FGR_H_DEAD)
            continue;
        size_t j = slot_of(old[i].kind, old[i].v);
        while (tab[j].kind)
            j = (j + 1) & (cap - 1);
        tab[j] = old[i];
    }
    used = live;
    free(old);
    return 0;
}

int fgr_has(int kind, uint64_t v)
{
    if (v == FGR_BAD_HANDLE)
        return 0;
    /* NULL is the driver's to refuse (or the current context, the
     * default stream); the two special streams are not pointers. */
    if (v == 0 || (kind == FGR_H_CUstream && (v == 1 || v == 2)))
        return 1;
    /* A kernel may be given where a function is asked for. */
    return find(kind, v) || (kind == FGR_H_CUfunction && find(FGR_H_CUkernel, v));
}

void fgr_each(int kind, void (*fn)(uint64_t v, uint64_t owner))
{
    for (size_t i = 0; i < cap; i++)
        if (tab[i].kind == kind)
            fn(tab[i].v, tab[i].owner);
}

/* An executable keeps what made the graph it was instantiated from (its
 * nodes' requests, its capture's) and then the graph's destroy: a program
 * may destroy a graph once it is instantiated (PyTorch's CUDA graphs do),
 * and a new executor makes the executable from the graph, then destroys
 * the graph as the program did. */
static uint64_t graph_named; /* the last graph a request named (fgr_in) */

/* Whether entry x is the graph g's, through at most 8 owners. */
static int of_graph(const struct ent *x, uint64_t g)
{
    for (int d = 0; d < 8 && x && x->okind; d++) {
        if (x->okind == FGR_H_CUgraph && x->owner == g)
            return 1;
        x = find(x->okind, x->owner);
    }
    return 0;
}

static void keep_graph(struct ent *x)
{
    struct ent *g = fgr_current_op == FGR_OP_cuGraphInstantiateWithFlags ||
                            fgr_current_op == FGR_OP_cuGraphInstantiateWithParams ||
                            fgr_current_op == FGR_OP_cuGraphInstantiateWithParams_ptsz
                        ? find(FGR_H_CUgraph, graph_named)
                        : NULL;
    if (!g)
        return;
    x->from = g->v;
    x->made = fgr_journal_share(x->made, g->made);
    for (size_t i = 0; i < cap; i++)
        if (tab[i].kind && tab[i].kind != FGR_H_DEAD && of_graph(&tab[i], g->v))
            x->made = fgr_journal_share(x->made, tab[i].made);
}

void fgr_add(int kind, uint64_t v, int okind, uint64_t owner)
{
    /* A kernel returned for a function keeps its name. */
    struct ent *had = v ? find(kind, v) : NULL;
    if (!had && v && kind == FGR_H_CUfunction)
        had = find(FGR_H_CUkernel, v);
    if (had && had->idle) {
        /* The retain that brings it back makes it, under its name. */
        had->idle = 0;
        had->made = fgr_journal_attach(NULL);
        fgr_journal_named(had->name, names[had->name].gen);
    } else if (had) {
        had->made = fgr_journal_attach(had->made); /* a retain, made again too */
    }
    if (v == 0 || had)
        return;
    if ((used + 1) * 4 > cap * 3 && grow())
        return; /* unknown then, so refused: never a handle the client did not get */
    size_t i = slot_of(kind, v);
    while (tab[i].kind && tab[i].kind != FGR_H_DEAD)
        i = (i + 1) & (cap - 1);
    if (!tab[i].kind)
        used++;
    /* Device ranges and shadow entries are not handed out by name. */
    uint32_t n = kind < FGR_H_MEM ? name_new(kind, v) : NO_NAME;
    tab[i] = (struct ent){v, owner, fgr_journal_attach(NULL), 0, n, (uint8_t)kind, (uint8_t)okind, 0, 0, 0};
    if (kind == FGR_H_CUgraphExec)
        keep_graph(&tab[i]);
}

int fgr_owned_by(int kind, uint64_t v, int okind)
{
    struct ent *e = find(kind, v);
    return e && e->okind == okind;
}

void fgr_own_by(int kind, uint64_t v, int okind, uint64_t owner)
{
    struct ent *e = find(kind, v);
    if (e) {
        e->okind = (uint8_t)okind;
        e->owner = owner;
    }
}

void fgr_retain(int kind, uint64_t v)
{
    struct ent *e = find(kind, v);
    if (e && e->refs < UINT32_MAX)
        e->refs++;
    if (e)
        e->made = fgr_journal_attach(e->made);
}

void fgr_journal_changed(int kind, uint64_t v, uint32_t key)
{
    struct ent *e = v ? find(kind, v) : NULL;
    if (!e && v && kind == FGR_H_CUfunction)
        e = find(FGR_H_CUkernel, v);
    if (e)
        e->made = fgr_journal_replace(e->made, key);
}

size_t fgr_contexts(uint64_t *ctx, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < cap && n < max; i++)
        if (tab[i].kind == FGR_H_CUcontext)
            ctx[n++] = tab[i].v;
    return n;
}

static void drop_owned(int kind, uint64_t v);
static int owner_gone; /* inside drop_owned: kept ranges go too */
static struct range *range_of(uint64_t p);

/* A shadow entry is of kind | SHADOWED, owned by its real handle: it goes
 * when the handle does. */
#define SHADOWED 0x40

void fgr_shadow_add(int kind, uint64_t id, uint64_t real)
{
    fgr_add(kind | SHADOWED, id, kind, real);
    struct ent *e = find(kind, real);
    if (e)
        e->shadow = id;
}

/* The first name of the request being served that fgr_in refused, as
 * the client sent it: what a refusal logs, rather than FGR_BAD_HANDLE. */
static uint64_t first_bad;
static int bad_seen;

void fgr_in_reset(void) { bad_seen = 0; }

static uint64_t refused_name(uint64_t v)
{
    if (!bad_seen)
        first_bad = v, bad_seen = 1;
    return FGR_BAD_HANDLE;
}

static uint64_t in(int kind, uint64_t v);

uint64_t fgr_in(int kind, uint64_t v)
{
    uint64_t x = in(kind, v);
    if (kind == FGR_H_CUstream)
        fgr_journal_stream(x); /* for the captures it takes part in */
    else if (kind == FGR_H_CUgraph)
        graph_named = x; /* for the executable it may make */
    return x;
}

static uint64_t in(int kind, uint64_t v)
{
    if (v == 0 || (kind == FGR_H_CUstream && (v == 1 || v == 2)))
        return v;
    if (fgr_is_shadow(v)) {
        struct ent *e = find(kind | SHADOWED, v);
        return e ? e->owner : refused_name(v);
    }
    keyed();
    if (v & 15 || v >> 46)
        return refused_name(v);
    uint64_t x = decipher(v >> 4);
    uint32_t i = (uint32_t)(x & (MAX_NAMES - 1));
    if (i >= nnames || !names[i].kind || (names[i].gen & GEN_MASK) != (uint32_t)(x >> INDEX_BITS & GEN_MASK) ||
        names[i].kind != (uint8_t)(x >> (GEN_BITS + INDEX_BITS)))
        return refused_name(v);
    /* A kernel may be given where a function is asked for. */
    if (names[i].kind != kind && !(kind == FGR_H_CUfunction && names[i].kind == FGR_H_CUkernel))
        return refused_name(v);
    return names[i].v;
}

void fgr_in_n(int kind, void *arr, uint64_t n)
{
    for (uint64_t i = 0; arr && i < n; i++) {
        uint64_t v;
        memcpy(&v, (char *)arr + 8 * i, 8);
        v = fgr_in(kind, v);
        memcpy((char *)arr + 8 * i, &v, 8);
    }
}

int fgr_out_n(int kind, void *arr, uint64_t n)
{
    int bad = 0;
    for (uint64_t i = 0; arr && i < n; i++) {
        uint64_t v;
        memcpy(&v, (char *)arr + 8 * i, 8);
        struct ent *e = v ? find(kind, v) : NULL;
        if (!e && v && kind == FGR_H_CUfunction)
            e = find(FGR_H_CUkernel, v);
        uint64_t name = e && e->shadow ? e->shadow : e && e->name != NO_NAME ? name_value(e->name) : 0;
        bad |= v && !name; /* never the driver's value: NULL in its place */
        memcpy((char *)arr + 8 * i, &name, 8);
    }
    return bad ? -1 : 0;
}

static CUresult (*default_pool)(CUmemoryPool *, CUdevice);
static CUresult (*device_count)(int *);

void fgr_own_init(void *driver)
{
    *(void **)&default_pool = dlsym(driver, "cuDeviceGetDefaultMemPool");
    *(void **)&device_count = dlsym(driver, "cuDeviceGetCount");
}

/* A device's default pool, which a stream-ordered allocation of the
 * connection came from, is adopted as cuDeviceGetDefaultMemPool would give
 * it, which is what a move makes again. */
int fgr_out_adopt(int kind, void *p)
{
    uint64_t v;
    if (!p) /* asked for no result: a driver that answers anyway wrote nothing */
        return 0;
    memcpy(&v, p, 8);
    int n = 0, d = 0;
    if (v && !find(kind, v) && kind == FGR_H_CUmemoryPool && default_pool && device_count &&
        device_count(&n) == CUDA_SUCCESS) {
        CUmemoryPool q = NULL;
        while (d < n && (default_pool(&q, d) != CUDA_SUCCESS || (uint64_t)(uintptr_t)q != v))
            d++;
        if (d < n) {
            uint8_t args[9] = {0};
            for (int i = 0; i < 8; i++)
                args[i] = (uint8_t)((uint64_t)d >> (8 * i));
            args[8] = 1;
            fgr_journal_as(FGR_OP_cuDeviceGetDefaultMemPool, args, sizeof args);
            fgr_add(kind, v, 0, 0);
        }
    }
    return fgr_out_n(kind, p, 1);
}

/* The client's names of streams and events that went with their context,
 * the latest GONE_NAMES, and what the driver answers for them: a request
 * naming one is refused with that, as natively, not as a name never given. */
#define GONE_NAMES 1024
static struct {
    uint64_t name;
    CUresult r;
} gone[GONE_NAMES];
static unsigned gone_next;
static CUresult gone_why; /* while a context's names go: what they are answered */

static void moved_gone(uint64_t base, uint64_t end);

/* The names gone with their contexts, oldest first (after the names'
 * table in a state): a moved connection's requests naming one are refused
 * there as here. */
static void gone_save(struct fgr_buf *w)
{
    uint32_t n = gone_next < GONE_NAMES ? gone_next : GONE_NAMES;
    fgr_put_u32(w, n);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (gone_next - n + k) % GONE_NAMES;
        fgr_put_u64(w, gone[i].name);
        fgr_put_u32(w, (uint32_t)gone[i].r);
    }
}

static const char *gone_restore(struct fgr_rd *rd)
{
    uint32_t n = fgr_get_u32(rd);
    if (rd->bad || n > GONE_NAMES || n > rd->left / 12)
        return "the state's names gone with their contexts are malformed";
    for (uint32_t k = 0; k < n; k++) {
        uint64_t name = fgr_get_u64(rd);
        CUresult r = (CUresult)fgr_get_u32(rd);
        /* only what the driver answers for them (fgr_drop_with_context) */
        if (r != CUDA_ERROR_CONTEXT_IS_DESTROYED && r != CUDA_ERROR_INVALID_CONTEXT)
            return "the state's names gone with their contexts are malformed";
        gone[k].name = name, gone[k].r = r;
    }
    gone_next = n;
    return rd->bad ? "the state's names gone with their contexts are malformed" : NULL;
}

void fgr_drop(int kind, uint64_t v)
{
    struct ent *e = find(kind, v);
    if (e && e->refs) { /* released, but retained more often */
        e->refs--;
        return;
    }
    if (kind == FGR_H_MEM && !owner_gone) {
        struct range *r = range_of(v);
        if (r && r->base == v && r->kept)
            return;
    }
    if (e && kind == FGR_H_CUgraph)
        for (size_t i = 0; i < cap; i++)
            if (tab[i].kind == FGR_H_CUgraphExec && tab[i].from == v) {
                if (fgr_current_op == FGR_OP_cuGraphDestroy) /* made again after it */
                    tab[i].made = fgr_journal_attach(tab[i].made);
                tab[i].from = 0;
            }
    if (e) {
        if (gone_why && (kind & SHADOWED))
            gone[gone_next++ % GONE_NAMES] = (typeof(gone[0])){v, gone_why};
        e->kind = FGR_H_DEAD;
        name_free(e->name);
        if ((kind == FGR_H_CUstream && fgr_current_op == FGR_OP_cuStreamDestroy_v2) ||
            (kind == FGR_H_CUevent && fgr_current_op == FGR_OP_cuEventDestroy_v2))
            fgr_journal_gone(e->made); /* an open capture may have named it */
        fgr_journal_detach(e->made);
        e->made = NULL;
        drop_owned(kind, v);
    }
    if (kind == FGR_H_MEM) {
        for (size_t i = 0; i < nmem; i++)
            if (mem[i].base == v) {
                moved_gone(mem[i].base, mem[i].end);
                memmove(&mem[i], &mem[i + 1], (nmem - i - 1) * sizeof *mem);
                nmem--;
                fgr_generation++;
                break;
            }
    }
}

void fgr_context_idle(uint64_t ctx)
{
    struct ent *e = find(FGR_H_CUcontext, ctx);
    if (!e)
        return;
    fgr_journal_detach(e->made);
    e->made = NULL;
    e->idle = 1;
}

int fgr_context_is_idle(uint64_t ctx)
{
    struct ent *e = find(FGR_H_CUcontext, ctx);
    return e && e->idle;
}

void fgr_drop_with_context(uint64_t ctx, CUresult why)
{
    gone_why = why;
    drop_owned(FGR_H_CUcontext, ctx);
    gone_why = CUDA_SUCCESS;
}

/* Everything owned by (kind, v), and what that owns in turn. */
static void drop_owned(int kind, uint64_t v)
{
    owner_gone++;
    for (size_t i = 0; i < cap; i++)
        if (tab[i].kind && tab[i].kind != FGR_H_DEAD && tab[i].okind == kind && tab[i].owner == v)
            fgr_drop(tab[i].kind, tab[i].v);
    owner_gone--;
    for (size_t i = 0; i < nmem;) {
        if (mem[i].okind == kind && mem[i].owner == v) {
            memmove(&mem[i], &mem[i + 1], (nmem - i - 1) * sizeof *mem);
            nmem--;
            fgr_generation++;
        } else {
            i++;
        }
    }
}

/* The index of the first range whose base is above p (the bases are
 * sorted). */
static size_t above(uint64_t p)
{
    size_t lo = 0, hi = nmem;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (mem[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The range holding p. */
static struct range *range_of(uint64_t p)
{
    size_t i = above(p);
    return i && p < mem[i - 1].end ? &mem[i - 1] : NULL;
}

int fgr_mem_in(uint64_t p, uint64_t n)
{
    struct range *r = range_of(p);
    if (n == 0) /* touches nothing: NULL, or an address of the client's */
        return p == 0 || r || range_of(p - 1);
    return r && n <= r->end - p;
}

static uint64_t moved_back(uint64_t base, uint64_t size);

/* The connection's ranges, each at the program's address for it (memory
 * the driver placed elsewhere here after a move keeps the program's). */
void fgr_mem_list(struct fgr_buf *w, int ops)
{
    fgr_put_u32(w, (uint32_t)nmem);
    for (size_t i = 0; i < nmem; i++) {
        if (ops) {
            struct ent *e = find(FGR_H_MEM, mem[i].base);
            fgr_put_u16(w, (uint16_t)(e ? fgr_journal_op(e->made) : 0));
            fgr_put_u32(w, e ? fgr_journal_seq(e->made) : UINT32_MAX);
            continue;
        }
        fgr_put_u64(w, moved_back(mem[i].base, mem[i].end - mem[i].base));
        fgr_put_u64(w, mem[i].end - mem[i].base);
    }
}

/* Sorted by old once settled; taken: new memory of the connection's lies
 * there since, so the client's old address is ambiguous. */
static struct moved {
    uint64_t old, end, now;
    int taken;
} *moved;
static size_t nmoved, capmoved;

int fgr_moved_add(uint64_t old, uint64_t size, uint64_t now)
{
    if (nmoved == capmoved) {
        size_t n = capmoved ? 2 * capmoved : 64;
        struct moved *m = realloc(moved, n * sizeof *m);
        if (!m)
            return -1;
        moved = m;
        capmoved = n;
    }
    moved[nmoved++] = (struct moved){old, old + size, now, 0};
    return 0;
}

static int by_old(const void *a, const void *b)
{
    const struct moved *x = a, *y = b;
    return x->old < y->old ? -1 : x->old > y->old;
}

void fgr_moved_settle(void) { qsort(moved, nmoved, sizeof *moved, by_old); }

uint64_t fgr_moved(uint64_t p)
{
    if (!nmoved)
        return p;
    size_t lo = 0, hi = nmoved;
    while (lo < hi) { /* the first that ends above p */
        size_t mid = (lo + hi) / 2;
        if (moved[mid].end <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == nmoved || moved[lo].old > p)
        return p;
    if (moved[lo].taken) {
        if (moved[lo].taken++ == 1)
            fgr_logf("the program used the old address 0x%llx of memory that moved, where other memory lies since: "
                     "refused (a kernel given it faults)",
                     (unsigned long long)p);
        return FGR_MOVED_GONE;
    }
    return moved[lo].now + (p - moved[lo].old);
}

uint64_t fgr_unmoved(uint64_t p)
{
    for (size_t i = 0; i < nmoved; i++)
        if (!moved[i].taken && p >= moved[i].now && p - moved[i].now < moved[i].end - moved[i].old)
            return moved[i].old + (p - moved[i].now);
    return p;
}

/* The program's address of the range at base here: the old address of
 * the move that placed it, unless another range lies there since. */
static uint64_t moved_back(uint64_t base, uint64_t size)
{
    for (size_t i = 0; i < nmoved; i++)
        if (moved[i].now == base && moved[i].end - moved[i].old == size && !moved[i].taken)
            return moved[i].old;
    return base;
}

/* The memory at [base, end) here freed: the old addresses that named it
 * name nothing any more (a replay that allocates again aliases them anew). */
static void moved_gone(uint64_t base, uint64_t end)
{
    size_t k = 0;
    for (size_t i = 0; i < nmoved; i++)
        if (moved[i].now < base || moved[i].now >= end)
            moved[k++] = moved[i];
    nmoved = k;
}

/* New memory at [base, base+size): an old address there is ambiguous. */
static void moved_taken(uint64_t base, uint64_t size)
{
    for (size_t i = 0; i < nmoved; i++)
        if (moved[i].old < base + size && base < moved[i].end && !moved[i].taken)
            moved[i].taken = 1;
}

void fgr_moved_words(void *p, size_t n)
{
    if (!nmoved)
        return;
    for (size_t at = 0; at + 8 <= n; at += 8) {
        uint64_t v;
        memcpy(&v, (uint8_t *)p + at, 8);
        uint64_t w = fgr_moved(v);
        if (w != v)
            memcpy((uint8_t *)p + at, &w, 8);
    }
}

int fgr_mem_base(uint64_t p) { return p == 0 || find(FGR_H_MEM, p); }

uint64_t fgr_mem_size(uint64_t base)
{
    struct range *r = range_of(base);
    return r && r->base == base ? r->end - base : 0;
}

int fgr_mem_clear(uint64_t p, uint64_t n)
{
    if (n == 0 || p + n < p || range_of(p))
        return 0;
    size_t i = above(p);
    return i == nmem || mem[i].base >= p + n;
}

void fgr_mem_drop_within(uint64_t lo, uint64_t hi)
{
    for (size_t i = 0; i < nmem;)
        if (mem[i].base >= lo && mem[i].base < hi)
            fgr_drop(FGR_H_MEM, mem[i].base); /* moves the rest down */
        else
            i++;
}

static void moved_taken(uint64_t base, uint64_t size);

/* A graph allocation's range stays the connection's when the allocation is
 * freed (kept), until its context goes: each launch of the graph uses the
 * same addresses. Once the graph is gone the driver hands them out again,
 * so new memory over a kept range means that range is gone. */
static void drop_kept_over(uint64_t base, uint64_t end)
{
    size_t i = above(base);
    if (i > 0 && mem[i - 1].end > base)
        i--;
    while (i < nmem && mem[i].base < end) {
        if (!mem[i].kept) {
            i++;
            continue;
        }
        owner_gone++;
        fgr_drop(FGR_H_MEM, mem[i].base); /* moves the rest down */
        owner_gone--;
    }
}

void fgr_mem_add(uint64_t base, uint64_t size, int okind, uint64_t owner)
{
    if (base == 0 || size == 0 || base + size < base)
        return;
    drop_kept_over(base, base + size);
    if (range_of(base))
        return;
    if (nmem == capmem) {
        size_t n = capmem ? 2 * capmem : 64;
        struct range *m = realloc(mem, n * sizeof *m);
        if (!m)
            return; /* unknown then, so refused */
        mem = m;
        capmem = n;
    }
    size_t i = above(base);
    memmove(&mem[i + 1], &mem[i], (nmem - i) * sizeof *mem);
    mem[i] = (struct range){base, base + size, owner, (uint8_t)okind, 0};
    nmem++;
    fgr_generation++;
    fgr_add(FGR_H_MEM, base, okind, owner);
    fgr_journal_range(base, size);
    if (nmoved)
        moved_taken(base, size);
}

void fgr_mem_add_kept(uint64_t base, uint64_t size, int okind, uint64_t owner)
{
    fgr_mem_add(base, size, okind, owner);
    struct range *r = range_of(base);
    if (r && r->base == base)
        r->kept = 1;
}

/* The allocation holding p as the driver says, or where it does not (a
 * module's managed variables, on a GPU), the n bytes at p the call gave. */
void fgr_mem_add_found(uint64_t p, uint64_t n, int okind, uint64_t owner)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    if (p && fgr_drv.range && fgr_drv.range(&base, &size, (CUdeviceptr)p) == CUDA_SUCCESS && base <= p &&
        p - base < size && n <= base + size - p)
        fgr_mem_add(base, size, okind, owner);
    else
        fgr_mem_add(p, n, okind, owner);
}

static int refusals;

FILE *fgr_log;

void fgr_logf(const char *fmt, ...)
{
    FILE *log = fgr_log ? fgr_log : stderr;
    va_list ap;
    va_start(ap, fmt);
    fprintf(log, "flexgv-executor[%d] %s: ", (int)getpid(), fgr_peer);
    vfprintf(log, fmt, ap);
    fputc('\n', log);
    va_end(ap);
}

CUresult fgr_refuse(const char *call, const char *param, uint64_t v, CUresult r)
{
    uint64_t named = v == FGR_BAD_HANDLE && bad_seen ? first_bad : v;
    int went = 0;
    for (unsigned i = 0; named && i < GONE_NAMES && i < gone_next; i++)
        if (gone[i].name == named)
            r = gone[i].r, went = 1;
    if (refusals++ == 0)
        fprintf(fgr_log ? fgr_log : stderr,
                "flexgv-executor[%d] %s: refusing %s: %s=0x%llx %s %s%s "
                "(error %d; further refusals on this connection are not logged)\n",
                (int)getpid(), fgr_peer, call, param, (unsigned long long)named,
                went ? "went with its context, a" : "is not a",
                r == CUDA_ERROR_INVALID_VALUE ? "device address range" : "handle",
                went ? "" : " this connection was given", (int)r);
    return r;
}

CUresult fgr_refuse_size(const char *call, const char *param, uint64_t v, CUresult r)
{
    if (refusals++ == 0)
        fgr_logf("refusing %s: %s would be %llu bytes, more than the %u a result of its kind may be "
                 "(error %d; further refusals on this connection are not logged)",
                 call, param, (unsigned long long)v, FGR_SMALL_FRAME, (int)r);
    return r;
}

int fgr_has_n(int kind, const void *arr, uint64_t n)
{
    const uint64_t *v = arr;
    for (uint64_t i = 0; v && i < n; i++)
        if (!fgr_has(kind, v[i]))
            return 0;
    return 1;
}
