/* The per-process record table of memory quotas: fixed capacity, open
 * addressing with linear probing and backward-shift deletion (no tombstones,
 * so probes stay short however long the program churns). Its memory is
 * mapped at the first charged allocation. A small spin lock guards it; it is
 * only held for a few probes, never across a driver call, and a forked child
 * simply starts over. */
#include "memquota.h"

#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#define CAP (1u << 17)
#define MAX_LIVE (CAP / 4 * 3)

static struct rec *table;
static int taken; /* live records + reservations, never above MAX_LIVE */
static int counts[R_NKINDS];
static int spin;

void fg_rec_lock(void)
{
    while (__atomic_exchange_n(&spin, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&spin, __ATOMIC_RELAXED))
            sched_yield();
}

void fg_rec_unlock(void) { __atomic_store_n(&spin, 0, __ATOMIC_RELEASE); }

static struct rec *get_table(void)
{
    struct rec *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (t)
        return t;
    void *m = mmap(NULL, CAP * sizeof(struct rec), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    struct rec *expected = NULL;
    if (!__atomic_compare_exchange_n(&table, &expected, (struct rec *)m, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        munmap(m, CAP * sizeof(struct rec));
        return expected;
    }
    return m;
}

int fg_rec_reserve(void)
{
    if (!get_table())
        return 0;
    int n = __atomic_load_n(&taken, __ATOMIC_RELAXED);
    do {
        if (n >= (int)MAX_LIVE)
            return 0;
    } while (!__atomic_compare_exchange_n(&taken, &n, n + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return 1;
}

void fg_rec_unreserve(void) { __atomic_fetch_sub(&taken, 1, __ATOMIC_RELAXED); }

static uint32_t home(uintptr_t key, int kind)
{
    uint64_t h = ((uint64_t)key ^ ((uint64_t)kind << 58)) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 40) & (CAP - 1);
}

struct rec *fg_rec_find(uintptr_t key, enum rec_kind kind)
{
    if (!table || !key)
        return NULL;
    for (uint32_t i = home(key, kind);; i = (i + 1) & (CAP - 1)) {
        if (table[i].key == 0)
            return NULL;
        if (table[i].key == key && table[i].kind == kind)
            return &table[i];
    }
}

struct rec *fg_rec_put(uintptr_t key, enum rec_kind kind, int dev, uint64_t bytes, uintptr_t owner)
{
    struct rec *r = fg_rec_find(key, kind);
    if (r) {
        fg_uncharge(r->dev, r->bytes);
        fg_rec_unreserve();
    } else {
        uint32_t i = home(key, kind);
        while (table[i].key)
            i = (i + 1) & (CAP - 1);
        r = &table[i];
        counts[kind]++;
    }
    *r = (struct rec){.key = key, .kind = (uint8_t)kind, .dev = (int16_t)dev, .bytes = bytes, .owner = owner};
    return r;
}

void fg_rec_drop(struct rec *r)
{
    fg_uncharge(r->dev, r->bytes);
    counts[r->kind]--;
    fg_rec_unreserve();
    /* Backward shift: pull later members of the cluster into the hole when
     * the hole lies between their home and where they sit. */
    uint32_t hole = (uint32_t)(r - table);
    for (uint32_t j = (hole + 1) & (CAP - 1); table[j].key; j = (j + 1) & (CAP - 1)) {
        uint32_t h = home(table[j].key, table[j].kind);
        if (((j - h) & (CAP - 1)) >= ((j - hole) & (CAP - 1))) {
            table[hole] = table[j];
            hole = j;
        }
    }
    table[hole].key = 0;
}

/* Starting right after an empty slot, a record can only shift backwards
 * within its cluster, so re-examining the slot just dropped visits every
 * record exactly once. */
void fg_rec_each(enum rec_kind kind, int (*fn)(struct rec *, void *), void *arg)
{
    if (!table || !counts[kind])
        return;
    uint32_t start = 0;
    while (table[start].key)
        start++;
    for (uint32_t n = 0; n < CAP; n++) {
        uint32_t i = (start + 1 + n) & (CAP - 1);
        for (;;) {
            struct rec *r = &table[i];
            if (!r->key || r->kind != kind)
                break;
            uintptr_t key = r->key;
            if (fn(r, arg))
                return;
            if (r->key == key)
                break; /* kept: move on */
        }
    }
}

int fg_rec_count(enum rec_kind kind) { return __atomic_load_n(&counts[kind], __ATOMIC_RELAXED); }

/* Async-signal-safe: the child's copy of the table describes its parent's
 * memory; it starts with none (the copy is left unmapped-from, not freed). */
void fg_rec_after_fork(void)
{
    table = NULL;
    taken = 0;
    memset(counts, 0, sizeof counts);
    spin = 0;
}
