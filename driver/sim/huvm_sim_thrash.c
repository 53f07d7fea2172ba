/*
 * huvm: UVM's thrashing detection and mitigation in the simulated node (semantics: huvm_sim_thrash.h).
 * SPDX-License-Identifier: MIT
 */
#include <stdlib.h>
#include <string.h>

#include "huvm_sim_thrash.h"

#define THR_NIL HUVM_SIM_THR_UNTRACKED

static uint32_t proc_bit(uint8_t id)
{
    return 1u << (id & 31u);
}

static void sat_inc16(uint16_t *v)
{
    if (*v != 0xffffu)
        (*v)++;
}

void huvm_sim_thr_default_params(huvm_sim_thr_params_t *p)
{
    p->threshold = HUVM_SIM_THR_THRESHOLD_DEFAULT;
    p->pin_threshold = HUVM_SIM_THR_PIN_THRESHOLD_DEFAULT;
    p->max_resets = HUVM_SIM_THR_MAX_RESETS_DEFAULT;
    p->lapse_ns = HUVM_SIM_THR_LAPSE_NS_DEFAULT;
    p->nap_ns = p->lapse_ns * HUVM_SIM_THR_NAP_DEFAULT;
    p->epoch_ns = p->lapse_ns * HUVM_SIM_THR_EPOCH_DEFAULT;
    p->pin_ns = p->lapse_ns * HUVM_SIM_THR_PIN_DEFAULT;
}

void huvm_sim_thr_init(huvm_sim_thr_t *thr, const huvm_sim_thr_params_t *p)
{
    memset(thr, 0, sizeof(*thr));
    thr->p = *p;
    thr->free_head = THR_NIL;
}

int huvm_sim_thr_grow(huvm_sim_thr_t *thr, uint32_t n_blocks)
{
    huvm_sim_thr_gate_t *gate;
    uint32_t i;

    if (n_blocks <= thr->n_blocks)
        return 0;
    gate = realloc(thr->gate, (size_t)n_blocks * sizeof(*gate));
    if (!gate)
        return -1;
    for (i = thr->n_blocks; i < n_blocks; i++) {
        memset(&gate[i], 0, sizeof(gate[i]));
        gate[i].slot = THR_NIL;
        gate[i].last_proc = HUVM_SIM_THR_NONE;
    }
    thr->gate = gate;
    thr->n_blocks = n_blocks;
    return 0;
}

void huvm_sim_thr_destroy(huvm_sim_thr_t *thr)
{
    free(thr->gate);
    free(thr->pool);
    memset(thr, 0, sizeof(*thr));
}

static huvm_sim_thr_page_t *slot_get(const huvm_sim_thr_t *thr, uint32_t blk)
{
    uint32_t s = thr->gate[blk].slot;

    return s == THR_NIL ? NULL : &thr->pool[s];
}

/* Start tracking a block (upstream allocates block_thrashing->pages); -1 out of memory. */
static int slot_alloc(huvm_sim_thr_t *thr, uint32_t blk)
{
    huvm_sim_thr_page_t *pg;
    uint32_t s;

    if (thr->free_head != THR_NIL) {
        s = thr->free_head;
        thr->free_head = (uint32_t)thr->pool[s].page_ts;
    }
    else {
        if (thr->pool_n == thr->pool_cap) {
            uint32_t cap = thr->pool_cap ? thr->pool_cap * 2 : 64;
            huvm_sim_thr_page_t *np = realloc(thr->pool, (size_t)cap * sizeof(*np));

            if (!np)
                return -1;
            thr->pool = np;
            thr->pool_cap = cap;
        }
        s = thr->pool_n++;
    }
    pg = &thr->pool[s];
    memset(pg, 0, sizeof(*pg));
    pg->dnt = HUVM_SIM_THR_NONE;
    pg->pinned_res = HUVM_SIM_THR_NONE;
    thr->gate[blk].slot = s;
    return 0;
}

static void slot_free(huvm_sim_thr_t *thr, uint32_t blk)
{
    uint32_t s = thr->gate[blk].slot;

    thr->pool[s].page_ts = thr->free_head;
    thr->free_head = s;
    thr->gate[blk].slot = THR_NIL;
}

/* thrashing_reset_page: the page is no longer thrashing (tracking of the block stays). */
static void page_reset(huvm_sim_thr_page_t *pg)
{
    pg->throttled = 0;
    pg->throttle_end = 0;
    pg->pinned = 0;
    pg->pinned_res = HUVM_SIM_THR_NONE;
    pg->pin_deadline = 0;
    pg->page_ts = 0;
    pg->events = 0;
    pg->processors = 0;
}

/* The delayed unpin work of upstream: a pin past its deadline is dropped and the page's state reset. */
static void pin_expire(huvm_sim_thr_t *thr, huvm_sim_thr_page_t *pg, uint64_t t)
{
    if (pg->pinned && thr->p.pin_ns && t >= pg->pin_deadline)
        page_reset(pg);
}

/* huvm_sim_thr_migrated (huvm_sim_thrash.h) past its inline common case; complete on its own. */
int huvm_sim_thr_migrated_tracked(huvm_sim_thr_t *thr, uint32_t blk, uint8_t dst, uint64_t t)
{
    huvm_sim_thr_gate_t *g = &thr->gate[blk];
    huvm_sim_thr_page_t *pg = slot_get(thr, blk);
    uint64_t last;
    int rc = 0;

    if (!pg) {
        /* Tracking starts only on a change of destination within the lapse. */
        if (g->last_ts == 0 || g->last_proc == dst || t - g->last_ts > thr->p.lapse_ns)
            goto done;
        if (slot_alloc(thr, blk)) {
            rc = -1;
            goto done;
        }
        pg = slot_get(thr, blk);
    }
    pin_expire(thr, pg, t);
    pg->processors |= proc_bit(dst);
    last = pg->page_ts;
    pg->page_ts = t;
    if (last == 0)
        goto done;
    if (t - last <= thr->p.lapse_ns) {
        sat_inc16(&pg->events);
        if (pg->events == thr->p.threshold)
            thr->detected++;
        if (pg->events >= thr->p.threshold)
            pg->last_thrashing_ts = t;
    }
    else if (pg->events >= thr->p.threshold && !pg->pinned) {
        page_reset(pg);
    }

done:
    g->last_ts = t;
    g->last_proc = dst;
    return rc;
}

huvm_sim_thr_hint_t huvm_sim_thr_hint(huvm_sim_thr_t *thr, uint32_t blk, uint8_t requester, uint64_t t)
{
    huvm_sim_thr_hint_t h = { HUVM_SIM_THR_HINT_NONE, HUVM_SIM_THR_NONE, 0 };
    huvm_sim_thr_gate_t *g = &thr->gate[blk];
    huvm_sim_thr_page_t *pg = slot_get(thr, blk);
    const uint32_t rb = proc_bit(requester);

    if (!pg)
        return h;
    pin_expire(thr, pg, t);

    /* An epoch without thrashing: drop the block's tracking (at most max_resets times). */
    if (pg->last_thrashing_ts != 0 && t - pg->last_thrashing_ts > thr->p.epoch_ns && !pg->pinned &&
        g->resets < thr->p.max_resets) {
        g->resets++;
        slot_free(thr, blk);
        g->last_proc = HUVM_SIM_THR_NONE;
        g->last_ts = 0;
        return h;
    }
    if (pg->events < thr->p.threshold)
        return h;

    if (pg->throttled & rb) {
        if (t < pg->throttle_end && requester != pg->dnt) {
            h.type = HUVM_SIM_THR_HINT_THROTTLE;
            h.end_ns = pg->throttle_end;
            thr->throttled++;
            return h;
        }
        pg->throttled &= ~rb;
        if (!pg->throttled)
            pg->throttle_end = 0;
    }
    if (t - pg->page_ts > thr->p.lapse_ns && !pg->pinned)
        return h;
    pg->processors |= rb;

    /* A new throttling period alternates the processor that is not throttled. */
    if (t > pg->throttle_end) {
        pg->throttle_end = t + thr->p.nap_ns;
        pg->dnt = pg->dnt == requester ? HUVM_SIM_THR_NONE : requester;
    }
    else if (pg->dnt == HUVM_SIM_THR_NONE) {
        pg->dnt = requester;
    }

    /* The hint when no preferred location is set (the simulator sets none). */
    if (pg->pinned) {
        if (requester == pg->dnt) {
            h.type = HUVM_SIM_THR_HINT_PIN;
            /* where every thrashing processor can map it: host memory unless only GPUs thrash, then here */
            h.residency = (pg->processors & proc_bit(HUVM_SIM_THR_CPU)) ? (uint8_t)HUVM_SIM_THR_CPU : requester;
        }
        else {
            /* host memory is mapped by every GPU; a GPU's memory by that GPU (peers: not modelled) */
            h.type = pg->pinned_res == HUVM_SIM_THR_CPU || pg->pinned_res == requester ? HUVM_SIM_THR_HINT_PIN
                                                                                       : HUVM_SIM_THR_HINT_THROTTLE;
            h.residency = pg->pinned_res;
        }
    }
    else if (requester != pg->dnt) {
        h.type = HUVM_SIM_THR_HINT_THROTTLE;
    }
    else if (pg->throttling_count >= thr->p.pin_threshold) {
        h.type = HUVM_SIM_THR_HINT_PIN;
        h.residency = requester;
    }

    if (h.type == HUVM_SIM_THR_HINT_PIN) {
        if (!pg->pinned || pg->pinned_res != h.residency) {
            pg->throttled = 0;
            pg->throttle_end = 0;
        }
        if (!pg->pinned) {
            pg->pin_deadline = thr->p.pin_ns ? t + thr->p.pin_ns : 0;
            pg->throttling_count = 0;
            pg->pinned = 1;
        }
        pg->pinned_res = h.residency;
        thr->pinned++;
    }
    else if (h.type == HUVM_SIM_THR_HINT_THROTTLE) {
        if (!(pg->throttled & rb)) {
            pg->throttled |= rb;
            if (!pg->pinned)
                sat_inc16(&pg->throttling_count);
        }
        h.end_ns = pg->throttle_end;
        thr->throttled++;
    }
    return h;
}

int huvm_sim_thr_is_pinned(huvm_sim_thr_t *thr, uint32_t blk, uint64_t t, uint8_t *res)
{
    huvm_sim_thr_page_t *pg = slot_get(thr, blk);

    if (!pg)
        return 0;
    pin_expire(thr, pg, t);
    if (!pg->pinned)
        return 0;
    if (res)
        *res = pg->pinned_res;
    return 1;
}

uint32_t huvm_sim_thr_events(const huvm_sim_thr_t *thr, uint32_t blk)
{
    const huvm_sim_thr_page_t *pg = slot_get(thr, blk);

    return pg ? pg->events : 0;
}
