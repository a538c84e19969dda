/* Gang turns of the compute policy. A tenant's ranks on several GPUs
 * (data-parallel training) meet in collectives, whose kernels spin on each
 * GPU until every rank's runs: turns taken GPU by GPU can give each GPU to
 * another tenant, and each holder's collective then spins through its
 * turn, waiting for a rank that waits for the other GPU. So among equal
 * priorities, on every GPU but the lowest that two tenants both use, the
 * one that holds that lowest GPU goes first: the other GPUs follow its
 * turns, and share as it does. */
#include "compute.h"

#include <string.h>

/* Whether a process of the tenant named `name` has launched on g, or
 * (active) waits or has work in flight there. */
static int tenant_on(struct gpu *g, const char *name, int active)
{
    for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
        for (uint64_t m = LOAD(&g->hdr->present[w]); m; m &= m - 1) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(m);
            struct fg_sched_tenant *t = tenant_of(g, i);
            int on = active ? mask_has(g->hdr->waiting, i) || LOAD(&g->slots[i].inflight) : LOAD(&g->slots[i].launches) != 0;
            if (t && on && !strncmp(t->name, name, sizeof t->name))
                return 1;
        }
    return 0;
}

/* The next scheduled GPU below g from l on that has a holder, and that
 * holder's tenant (*ht) and slot + 1 (*h); NULL past g. With one GPU
 * there is none. */
static struct gpu *held_below(struct gpu *g, struct gpu *l, struct fg_sched_tenant **ht, uint32_t *h)
{
    for (; __atomic_load_n(&nmine, __ATOMIC_ACQUIRE) > 1 && l < g; l++) {
        if (__atomic_load_n(&l->state, __ATOMIC_ACQUIRE) != G_READY)
            continue;
        *h = LOAD(&l->hdr->holder);
        if ((*ht = *h ? tenant_of(l, *h - 1) : NULL))
            return l;
    }
    return NULL;
}

/* 1 when tenant a leads b on g (a holds the lowest GPU below g that both
 * use), -1 when b leads a, 0 when neither does. */
int leads(struct gpu *g, struct fg_sched_tenant *a, struct fg_sched_tenant *b)
{
    struct fg_sched_tenant *ht;
    uint32_t h;
    for (struct gpu *l = gpus; a != b && (l = held_below(g, l, &ht, &h)); l++) {
        int ha = !strncmp(ht->name, a->name, sizeof ht->name), hb = !strncmp(ht->name, b->name, sizeof ht->name);
        if (ha && tenant_on(l, b->name, 0))
            return 1;
        if (hb && tenant_on(l, a->name, 0))
            return -1;
    }
    return 0;
}

/* A lower GPU, both ours and another tenant's, whose turn means we should
 * not launch on g for now: (1) our gang holds it with the other waiting
 * there, and its quantum ends within GANG_AHEAD_NS, so its holder may hand
 * it over at its next launch (our ranks come to their launches together,
 * and what we launched first would miss its decision); (2) the other holds
 * it and is active on g, where we hold. What we launched would be a
 * collective left spinning through the other gang's turn. NULL if none;
 * *ending: in (1), the holder (slot + 1). */
struct gpu *gang_turn_over(struct gpu *g, uint64_t now, int *ending)
{
    struct fg_sched_tenant *ht;
    uint32_t h;
    *ending = 0;
    for (struct gpu *l = gpus; (l = held_below(g, l, &ht, &h)); l++) {
        if (strncmp(ht->name, g->t->name, sizeof ht->name)) {
            if (tenant_on(l, g->t->name, 0) && tenant_on(g, ht->name, 1))
                return l;
            continue;
        }
        for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
            for (uint64_t m = LOAD(&l->hdr->waiting[w]); m; m &= m - 1) {
                struct fg_sched_tenant *t = tenant_of(l, w * 64 + (uint32_t)__builtin_ctzll(m));
                if (t && strncmp(t->name, g->t->name, sizeof t->name) &&
                    now + GANG_AHEAD_NS >= LOAD(&l->hdr->turn_ends_ns))
                    return *ending = (int)h, l;
            }
    }
    return NULL;
}

/* A hand-over on g changes who leads on the GPUs above it: their waiters
 * look again. */
void wake_followers(struct gpu *g)
{
    for (struct gpu *f = g + 1; __atomic_load_n(&nmine, __ATOMIC_ACQUIRE) > 1 && f < gpus + FG_NDEV; f++)
        if (__atomic_load_n(&f->state, __ATOMIC_ACQUIRE) == G_READY)
            wake_all(f);
}
