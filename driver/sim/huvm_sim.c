/*
 * huvm: simulated node, the paging model and the event loop. SPDX-License-Identifier: MIT
 *
 * The loop runs ops, not touches: it always advances the tenant with the smallest clock (ties: lowest
 * index) by one op. An op makes its allocations live, walks its chunk touches (a resident chunk costs
 * nothing; the rest fault, in batches of fault_batch_max), computes for its op time (remote-mapped accesses
 * run concurrently over NVLink), then frees. Faults stall the tenant; prefetch and pre-eviction only occupy
 * links. Decisions: huvm_decide_*; movements: huvm_account_* (counters + USDT probes).
 *
 * Link sharing (res_xfer): FIFO within a traffic class, fair share between demand and background classes;
 * work conserving, O(1) per transfer, deterministic. See docs/simulator.md.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "huvm_sim_internal.h"

/* ---- small helpers ---- */

static inline uint64_t u64_max(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static inline uint64_t u64_min(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static inline void list_push_tail(sim_chunk_t *ch, sim_list_t *l, uint32_t i)
{
    ch[i].next = SIM_NIL;
    ch[i].prev = l->tail;
    if (l->tail != SIM_NIL)
        ch[l->tail].next = i;
    else
        l->head = i;
    l->tail = i;
    l->count++;
}

static inline void list_remove(sim_chunk_t *ch, sim_list_t *l, uint32_t i)
{
    uint32_t p = ch[i].prev, n = ch[i].next;

    if (p != SIM_NIL)
        ch[p].next = n;
    else
        l->head = n;
    if (n != SIM_NIL)
        ch[n].prev = p;
    else
        l->tail = p;
    ch[i].prev = ch[i].next = SIM_NIL;
    l->count--;
}

static inline void list_init(sim_list_t *l)
{
    l->head = l->tail = SIM_NIL;
    l->count = 0;
}

static inline uint64_t gpu_used(const sim_gpu_t *g)
{
    return g->pinned_chunks + g->own.count + g->guest_chunks;
}

/* Free memory: not used, and not held by a copy out of the GPU that is still in flight. */
static inline uint64_t gpu_free(const sim_gpu_t *g)
{
    uint64_t used = gpu_used(g) + g->inflight;

    return used < g->capacity_chunks ? g->capacity_chunks - used : 0;
}

static inline uint64_t chunk_va(const huvm_sim_t *sim, uint32_t ci)
{
    const sim_tenant_t *t = &sim->tenants[sim->chunks[ci].tenant];

    return t->spec.va_base + (uint64_t)(ci - t->chunk_base) * SIM_CHUNK;
}

/* A prefetched chunk was touched (used) or leaves unused: its owner's prefetch feedback. */
static inline void pf_note(huvm_sim_t *sim, sim_chunk_t *c, uint32_t used)
{
    sim_gpu_t *o = &sim->gpus[c->owner];

    c->flags &= (uint8_t)~SIM_CF_PREFETCHED;
    huvm_prefetch_feedback(&o->pf_used, &o->pf_unused, used);
}

/* GPU g's own use (its tenants' resident and cudaMalloc'd chunks) grew, or may have: note the peak. */
static inline void note_own(huvm_sim_t *sim, uint32_t g, uint64_t t)
{
    const sim_gpu_t *gg = &sim->gpus[g];

    huvm_peak_update(&sim->gpus[g].own_peak, (gg->own.count + gg->pinned_chunks) * SIM_CHUNK, t);
}

static void gpu_retire(huvm_sim_t *sim, uint32_t g, uint64_t t);

static void refresh_state(huvm_sim_t *sim)
{
    uint32_t g;

    for (g = 0; g < sim->cfg.gpu_count; g++) {
        gpu_retire(sim, g, sim->now);
        /* Memory a copy still in flight will free counts as free for the decisions (pre-eviction does not
         * free it twice); an allocation waits for it (make_room). */
        sim->state[g].free_bytes = (gpu_free(&sim->gpus[g]) + sim->gpus[g].inflight) * SIM_CHUNK;
        sim->state[g].last_evict_ns = sim->gpus[g].last_evict_ns;
        sim->state[g].last_pressure_ns = sim->gpus[g].last_pressure_ns;
        sim->state[g].burst_chunks = sim->gpus[g].burst_chunks;
        sim->state[g].own_peak_bytes = sim->gpus[g].own_peak.bytes;
        sim->state[g].prefetch_used = sim->gpus[g].pf_used;
        sim->state[g].prefetch_unused = sim->gpus[g].pf_unused;
    }
}

/* ---- links ---- */

static inline sim_tok_t *tok_at(sim_res_t *r, uint32_t i)
{
    return &r->q[(r->qhead + i) & (r->qcap - 1)];
}

static void tok_pop(huvm_sim_t *sim, sim_res_t *r)
{
    sim_tok_t *k = tok_at(r, 0);

    if (k->release)
        sim->gpus[k->release - 1].inflight--;
    r->qhead = (r->qhead + 1) & (r->qcap - 1);
    r->qlen--;
}

/* Note a background copy on r ending at fin (chunk ci, freeing GPU release - 1's memory when it ends). If the
 * note cannot be kept (no memory), the copy is not tracked: its memory counts as free at once. */
static void tok_add(huvm_sim_t *sim, sim_res_t *r, uint64_t fin, uint32_t ci, uint32_t release)
{
    sim_tok_t *k;

    if (r->qlen == r->qcap) {
        uint32_t cap = r->qcap ? r->qcap * 2 : 64, i;
        sim_tok_t *q = malloc((size_t)cap * sizeof(*q));

        if (!q)
            return;
        for (i = 0; i < r->qlen; i++)
            q[i] = *tok_at(r, i);
        free(r->q);
        r->q = q;
        r->qcap = cap;
        r->qhead = 0;
    }
    k = &r->q[(r->qhead + r->qlen) & (r->qcap - 1)];
    k->fin = fin;
    k->chunk = ci;
    k->xfer = ci != SIM_NIL ? sim->chunks[ci].xfer : 0;
    k->release = release;
    r->qlen++;
    if (release)
        sim->gpus[release - 1].inflight++;
}

/* Demand traffic arriving at `start` took `shared` ns of r from the background class: every background copy
 * still queued ends later, by what it had left at `start` at most (fair share: half rate meanwhile). */
static void res_delay(huvm_sim_t *sim, sim_res_t *r, uint64_t start, uint64_t shared)
{
    uint32_t i;

    while (r->qlen && !tok_at(r, 0)->release && tok_at(r, 0)->fin <= start + r->latency_ns)
        tok_pop(sim, r);
    for (i = 0; i < r->qlen; i++) {
        sim_tok_t *k = tok_at(r, i);
        uint64_t end = k->fin - r->latency_ns, d;

        if (end <= start)
            continue;
        d = u64_min(shared, end - start);
        k->fin += d;
        if (k->chunk != SIM_NIL) {
            sim_chunk_t *c = &sim->chunks[k->chunk];

            if (c->xfer == k->xfer && c->ready_ns < k->fin)
                c->ready_ns = k->fin;
        }
    }
}

/* A transfer of `bytes` of class cls (SIM_FG/SIM_BG) arriving at t. Within a class, FIFO; between the two
 * classes, fair share: while the other class has queued work, this transfer progresses at half the rate, and
 * the other class's queue is pushed back by the work this one did meanwhile (background copies already
 * issued end later: res_delay). Work conserving. */
static uint64_t res_xfer(huvm_sim_t *sim, sim_res_t *r, uint64_t t, uint64_t bytes, int cls)
{
    uint64_t dur = (bytes * 1000 + r->mbyte_per_s - 1) / r->mbyte_per_s;
    uint64_t start = u64_max(t, r->busy_until[cls]);
    uint64_t other = r->busy_until[!cls];
    uint64_t overlap = other > start ? other - start : 0;
    uint64_t fin, shared;

    if (2 * dur <= overlap) {
        fin = start + 2 * dur;
        shared = dur;
    } else {
        fin = start + dur + overlap / 2;
        shared = overlap / 2;
    }
    r->busy_until[cls] = fin;
    if (overlap) {
        r->busy_until[!cls] = other + shared;
        if (cls == SIM_FG && r->qlen)
            res_delay(sim, r, start, shared);
    }
    r->busy_ns += dur;
    r->bytes += bytes;
    return fin + r->latency_ns;
}

/* One leg of a copy: over r, noted as in flight when it is a background copy. */
static uint64_t leg(huvm_sim_t *sim, sim_res_t *r, uint64_t t, uint64_t bytes, int cls, uint32_t ci,
                    uint32_t release)
{
    uint64_t fin;

    while (r->qlen && !tok_at(r, 0)->release && tok_at(r, 0)->fin <= t)
        tok_pop(sim, r);
    fin = res_xfer(sim, r, t, bytes, cls);
    if (cls == SIM_BG)
        tok_add(sim, r, fin, ci, release);
    return fin;
}

static inline void new_xfer(huvm_sim_t *sim, uint32_t ci)
{
    if (ci != SIM_NIL)
        sim->chunks[ci].xfer = ++sim->xfer_seq;
}

/* Host -> g (chunk ci or SIM_NIL): g's PCIe link and, behind a shared PCIe switch, the switch's uplink. */
static uint64_t xfer_h2d(huvm_sim_t *sim, uint32_t g, uint64_t t, uint64_t bytes, int cls, uint32_t ci)
{
    uint32_t sw = sim->cfg.pcie_switch[g];
    uint64_t fin;

    sim->traffic.host_to_gpu[g] += bytes;
    new_xfer(sim, ci);
    fin = leg(sim, &sim->gpus[g].h2d, t, bytes, cls, ci, 0);
    if (sw)
        fin = u64_max(fin, leg(sim, &sim->sw_h2d[sw - 1], t, bytes, cls, ci, 0));
    return fin;
}

/* g -> host; a background copy holds g's memory until it ends on g's own link (release). */
static uint64_t xfer_d2h(huvm_sim_t *sim, uint32_t g, uint64_t t, uint64_t bytes, int cls, uint32_t ci)
{
    uint32_t sw = sim->cfg.pcie_switch[g];
    uint64_t fin;

    sim->traffic.gpu_to_host[g] += bytes;
    new_xfer(sim, ci);
    fin = leg(sim, &sim->gpus[g].d2h, t, bytes, cls, ci, g + 1);
    if (sw)
        fin = u64_max(fin, leg(sim, &sim->sw_d2h[sw - 1], t, bytes, cls, ci, 0));
    return fin;
}

/* a -> b over the pair's direct path (remote-mapped reads: ci = SIM_NIL, demand class). */
static uint64_t xfer_peer_raw(huvm_sim_t *sim, uint32_t a, uint32_t b, uint64_t t, uint64_t bytes, int cls,
                              uint32_t ci)
{
    if (sim->cfg.link_type[a][b] == HUVM_LINK_PCIE) {
        /* PCIe peer-to-peer: a's upstream and b's downstream direction (not the switches' uplinks). */
        return u64_max(leg(sim, &sim->gpus[a].d2h, t, bytes, cls, ci, a + 1),
                       leg(sim, &sim->gpus[b].h2d, t, bytes, cls, ci, 0));
    }
    if (sim->cfg.flags & HUVM_SIM_FLAG_NVSWITCH)
        return u64_max(leg(sim, &sim->gpus[a].port_out, t, bytes, cls, ci, a + 1),
                       leg(sim, &sim->gpus[b].port_in, t, bytes, cls, ci, 0));
    return leg(sim, &sim->nvl[a][b], t, bytes, cls, ci, a + 1);
}

static uint64_t xfer_peer(huvm_sim_t *sim, uint32_t a, uint32_t b, uint64_t t, uint64_t bytes, int cls,
                          uint32_t ci)
{
    sim->traffic.gpu_to_gpu[a][b] += bytes;
    new_xfer(sim, ci);
    return xfer_peer_raw(sim, a, b, t, bytes, cls, ci);
}

/* Copies out of g still in flight at t that have ended give g its memory back. */
static void gpu_retire(huvm_sim_t *sim, uint32_t g, uint64_t t)
{
    sim_gpu_t *gg = &sim->gpus[g];
    uint32_t b;

    if (!gg->inflight)
        return;
    while (gg->d2h.qlen && tok_at(&gg->d2h, 0)->fin <= t)
        tok_pop(sim, &gg->d2h);
    while (gg->port_out.qlen && tok_at(&gg->port_out, 0)->fin <= t)
        tok_pop(sim, &gg->port_out);
    for (b = 0; b < sim->cfg.gpu_count; b++) {
        sim_res_t *r = &sim->nvl[g][b];

        while (r->qlen && tok_at(r, 0)->fin <= t)
            tok_pop(sim, r);
    }
}

/* When the first copy out of g still in flight ends (UINT64_MAX: none). */
static uint64_t gpu_inflight_next(const huvm_sim_t *sim, uint32_t g)
{
    const sim_gpu_t *gg = &sim->gpus[g];
    uint64_t m = UINT64_MAX;
    uint32_t b;

    if (gg->d2h.qlen)
        m = u64_min(m, gg->d2h.q[gg->d2h.qhead].fin);
    if (gg->port_out.qlen)
        m = u64_min(m, gg->port_out.q[gg->port_out.qhead].fin);
    for (b = 0; b < sim->cfg.gpu_count; b++) {
        const sim_res_t *r = &sim->nvl[g][b];

        if (r->qlen)
            m = u64_min(m, r->q[r->qhead].fin);
    }
    return m;
}

/* Guests' data copied into or out of lender h's memory takes HBM time from its running tenants. */
static inline void lend_charge(huvm_sim_t *sim, uint32_t h, uint64_t chunks)
{
    sim->gpus[h].lend_debt_ns += chunks * sim->cfg.lend_chunk_ns;
}

/* ---- creation ---- */

huvm_sim_t *huvm_sim_create(const huvm_sim_config_t *cfg, uint32_t preset, huvm_sim_error_t *err)
{
    huvm_sim_t *sim;
    uint32_t a, b, st;

    if (err)
        memset(err, 0, sizeof(*err));
    st = sim_config_validate(cfg, err);
    if (st != HUVM_NV_OK)
        return NULL;
    if (preset >= HUVM_PRESET_COUNT || preset == HUVM_PRESET_CUSTOM) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, "preset", "preset %u is not stock, atc22 or huvm",
                      preset);
        return NULL;
    }
    sim = calloc(1, sizeof(*sim));
    if (!sim) {
        sim_set_error(err, HUVM_NV_ERR_NO_MEMORY, -1, "", "out of memory");
        return NULL;
    }
    sim->cfg = *cfg;
    huvm_core_init(&sim->core, HUVM_BACKEND_SIM, preset);
    for (a = 0; a < cfg->gpu_count; a++) {
        sim_gpu_t *g = &sim->gpus[a];
        huvm_gpu_info_t info;

        memset(&info, 0, sizeof(info));
        /* Deterministic UUIDs: "HUVMSIM" + index. */
        memcpy(info.uuid, "HUVMSIM", 7);
        info.uuid[15] = (uint8_t)a;
        if (cfg->gpu_name[a][0])
            memcpy(info.name, cfg->gpu_name[a], sizeof(info.name) - 1);
        else
            info.name[0] = 's', info.name[1] = 'i', info.name[2] = 'm', info.name[3] = (char)('0' + a % 10);
        info.memory_bytes = cfg->gpu_memory_bytes[a] - cfg->gpu_reserved_bytes[a];
        info.free_bytes = info.memory_bytes;
        info.pcie_mbyte_per_s = cfg->pcie_mbyte_per_s[a];
        info.flags = HUVM_GPU_FLAG_PRESENT | HUVM_GPU_FLAG_REPLAYABLE_FAULTS | HUVM_GPU_FLAG_PMA_EVICTION;
        st = huvm_core_set_gpu(&sim->core, a, &info);
        if (st != HUVM_NV_OK) {
            char f[48];

            snprintf(f, sizeof(f), "gpus[%u]", a);
            sim_set_error(err, st, (int32_t)a, f, "the policy core refused GPU %u (status 0x%x)", a, st);
            free(sim);
            return NULL;
        }
        g->capacity_chunks = (cfg->flags & HUVM_SIM_FLAG_UNLIMITED) ? SIM_UNLIMITED_CHUNKS :
                             info.memory_bytes / SIM_CHUNK;
        list_init(&g->own);
        for (b = 0; b < HUVM_SIM_MAX_GPUS; b++)
            list_init(&g->guest[b]);
        g->h2d.mbyte_per_s = g->d2h.mbyte_per_s = cfg->pcie_mbyte_per_s[a];
        g->h2d.latency_ns = g->d2h.latency_ns = cfg->pcie_latency_ns;
        if (cfg->flags & HUVM_SIM_FLAG_NVSWITCH) {
            g->port_out.mbyte_per_s = g->port_in.mbyte_per_s = cfg->nvswitch_port_mbyte_per_s[a];
            g->port_out.latency_ns = g->port_in.latency_ns = cfg->nvlink_latency_ns;
        }
    }
    for (a = 0; a < cfg->gpu_count; a++) {
        for (b = 0; b < cfg->gpu_count; b++) {
            huvm_link_t link;

            if (a == b || cfg->link_type[a][b] == HUVM_LINK_NONE)
                continue;
            sim->gpus[a].candidates |= 1u << b;
            sim->nvl[a][b].mbyte_per_s = cfg->link_mbyte_per_s[a][b];
            sim->nvl[a][b].latency_ns = cfg->nvlink_latency_ns;
            memset(&link, 0, sizeof(link));
            link.link_type = cfg->link_type[a][b];
            link.link_count = cfg->link_count[a][b];
            link.mbyte_per_s = cfg->link_mbyte_per_s[a][b];
            st = huvm_core_set_link(&sim->core, a, b, &link);
            if (st != HUVM_NV_OK) {
                char f[48];

                snprintf(f, sizeof(f), "links[%u][%u]", a, b);
                sim_set_error(err, st, -1, f, "the policy core refused the link GPU %u->%u (status 0x%x)",
                              a, b, st);
                free(sim);
                return NULL;
            }
        }
    }
    for (a = 0; a < cfg->gpu_count; a++) {
        uint32_t sw = cfg->pcie_switch[a];

        if (sw) {
            sim->sw_h2d[sw - 1].mbyte_per_s = sim->sw_d2h[sw - 1].mbyte_per_s = cfg->pcie_switch_mbyte_per_s[sw - 1];
        }
    }
    sim->host_limit_chunks = cfg->host_memory_bytes ? cfg->host_memory_bytes / SIM_CHUNK : UINT64_MAX;
    sim->sample_interval = cfg->sample_interval_ns;
    return sim;
}

static void tenant_free(sim_tenant_t *t)
{
    free(t->op_time);
    free(t->first);
    free(t->touch);
    free(t->mode);
    free(t->aop);
    free(t->fop);
    free(t->alloc_first);
    free(t->alloc_list);
    free(t->free_first);
    free(t->free_list);
    free(t->static_list);
    free(t->step_end);
    memset(t, 0, sizeof(*t));
}

void huvm_sim_destroy(huvm_sim_t *sim)
{
    uint32_t i;

    if (!sim)
        return;
    for (i = 0; i < sim->n_tenants; i++)
        tenant_free(&sim->tenants[i]);
    for (i = 0; i < HUVM_SIM_MAX_GPUS; i++) {
        uint32_t b;

        free(sim->gpus[i].h2d.q);
        free(sim->gpus[i].d2h.q);
        free(sim->gpus[i].port_out.q);
        free(sim->gpus[i].port_in.q);
        free(sim->sw_h2d[i].q);
        free(sim->sw_d2h[i].q);
        for (b = 0; b < HUVM_SIM_MAX_GPUS; b++)
            free(sim->nvl[i][b].q);
    }
    free(sim->chunks);
    free(sim->samples);
    free(sim);
}

/* ---- tenants ---- */

static void *dup_array(const void *src, size_t n, size_t size)
{
    void *p = malloc(n ? n * size : 1);

    if (p && n)
        memcpy(p, src, n * size);
    return p;
}

/* Build a CSR list of chunks keyed by op (alloc or free op) for ops 0..n_ops-1. */
static int build_csr(const int32_t *key, uint32_t n_chunks, uint32_t n_ops, uint32_t **first_out,
                     uint32_t **list_out)
{
    uint32_t *first = calloc((size_t)n_ops + 1, sizeof(uint32_t));
    uint32_t *list, *pos, c, n = 0;

    if (!first)
        return -1;
    for (c = 0; c < n_chunks; c++) {
        if (key[c] >= 0) {
            first[key[c] + 1]++;
            n++;
        }
    }
    for (c = 0; c < n_ops; c++)
        first[c + 1] += first[c];
    list = malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
    pos = malloc(((size_t)n_ops + 1) * sizeof(uint32_t));
    if (!list || !pos) {
        free(first);
        free(list);
        free(pos);
        return -1;
    }
    memcpy(pos, first, ((size_t)n_ops + 1) * sizeof(uint32_t));
    for (c = 0; c < n_chunks; c++) {
        if (key[c] >= 0)
            list[pos[key[c]]++] = c;
    }
    free(pos);
    *first_out = first;
    *list_out = list;
    return 0;
}

static uint32_t tenant_validate(const huvm_sim_t *sim, uint32_t idx, const huvm_sim_tenant_spec_t *s,
                                huvm_sim_error_t *err)
{
    char f[64];
    uint32_t k, i, c;

#define TFIELD(name) (snprintf(f, sizeof(f), "tenants[%u].%s", idx, name), f)
    if (s->gpu >= sim->cfg.gpu_count) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, TFIELD("gpu"), "tenant %u: GPU %u is not in 0..%u",
                      idx, s->gpu, sim->cfg.gpu_count - 1);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->managed > 1) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, TFIELD("managed"), "tenant %u: managed must be 0 or 1",
                      idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->steps > SIM_MAX_STEPS) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, TFIELD("steps"), "tenant %u: %u steps is over %u",
                      idx, s->steps, SIM_MAX_STEPS);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->static_bytes > SIM_MAX_OP_NS || s->start_ns > SIM_MAX_OP_NS) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1,
                      TFIELD(s->start_ns > SIM_MAX_OP_NS ? "start_ns" : "static_bytes"),
                      "tenant %u: value out of range", idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->n_chunks > (1u << 28) || (uint64_t)sim->n_chunks + s->n_chunks > (1u << 30)) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, TFIELD("n_chunks"),
                      "tenant %u: %u chunks is too many (at most 2^30 on the node)", idx, s->n_chunks);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->n_ops == 0)
        return HUVM_NV_OK;
    if (!s->op_time_ns || !s->op_first_touch || (s->n_touches && (!s->touch_chunk || !s->touch_mode)) ||
        (s->n_chunks && (!s->chunk_alloc_op || !s->chunk_free_op))) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, TFIELD("arrays"), "tenant %u: a trace array is missing",
                      idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->op_first_touch[0] != 0 || s->op_first_touch[s->n_ops] != s->n_touches) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, TFIELD("op_first_touch"),
                      "tenant %u: op_first_touch must run from 0 to n_touches (%u)", idx, s->n_touches);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    for (k = 0; k < s->n_ops; k++) {
        if (s->op_first_touch[k + 1] < s->op_first_touch[k]) {
            sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, (int32_t)k, TFIELD("op_first_touch"),
                          "tenant %u: op %u: touch offsets decrease", idx, k);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        if (s->op_time_ns[k] > SIM_MAX_OP_NS) {
            sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, (int32_t)k, TFIELD("op_time_ns"),
                          "tenant %u: op %u: time %llu ns is out of range", idx, k,
                          (unsigned long long)s->op_time_ns[k]);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
    }
    for (c = 0; c < s->n_chunks; c++) {
        int32_t a = s->chunk_alloc_op[c], fr = s->chunk_free_op[c];

        if (a < -1 || a >= (int32_t)s->n_ops || fr < -1 || fr >= (int32_t)s->n_ops) {
            sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, (int32_t)c,
                          TFIELD(a < -1 || a >= (int32_t)s->n_ops ? "chunk_alloc_op" : "chunk_free_op"),
                          "tenant %u: chunk %u: alloc op %d / free op %d not in -1..%u", idx, c, a, fr,
                          s->n_ops - 1);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        if (a >= 0 && fr >= 0 && fr < a) {
            sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, (int32_t)c, TFIELD("chunk_free_op"),
                          "tenant %u: chunk %u is freed at op %d before its allocation at op %d", idx, c, fr, a);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
    }
    for (k = 0; k < s->n_ops; k++) {
        for (i = s->op_first_touch[k]; i < s->op_first_touch[k + 1]; i++) {
            uint32_t ch = s->touch_chunk[i];

            if (ch >= s->n_chunks) {
                sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, (int32_t)i, TFIELD("touch_chunk"),
                              "tenant %u: op %u touch %u references chunk %u, but the trace has %u chunks",
                              idx, k, i, ch, s->n_chunks);
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
            if ((s->chunk_alloc_op[ch] >= 0 && (uint32_t)s->chunk_alloc_op[ch] > k) ||
                (s->chunk_free_op[ch] >= 0 && (uint32_t)s->chunk_free_op[ch] < k)) {
                sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, (int32_t)i, TFIELD("touch_chunk"),
                              "tenant %u: op %u touch %u references chunk %u outside its life (ops %d..%d)",
                              idx, k, i, ch, s->chunk_alloc_op[ch], s->chunk_free_op[ch]);
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
            if (s->touch_mode[i] > 2) {
                sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, (int32_t)i, TFIELD("touch_mode"),
                              "tenant %u: op %u touch %u has mode %u (0 read, 1 write-new, 2 rmw)", idx, k, i,
                              s->touch_mode[i]);
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
        }
    }
#undef TFIELD
    return HUVM_NV_OK;
}

int32_t huvm_sim_add_tenant(huvm_sim_t *sim, const huvm_sim_tenant_spec_t *spec, huvm_sim_error_t *err)
{
    sim_tenant_t *t;
    sim_chunk_t *chunks;
    uint32_t idx, c, st, n;

    if (err)
        memset(err, 0, sizeof(*err));
    if (!sim || !spec) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, "tenant", "no simulator or tenant given");
        return -1;
    }
    if (sim->started) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_STATE, -1, "tenant", "tenants must be added before the run starts");
        return -1;
    }
    if (sim->n_tenants >= HUVM_SIM_MAX_TENANTS) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, "tenants", "at most %u tenants", HUVM_SIM_MAX_TENANTS);
        return -1;
    }
    idx = sim->n_tenants;
    st = tenant_validate(sim, idx, spec, err);
    if (st != HUVM_NV_OK)
        return -1;
    t = &sim->tenants[idx];
    memset(t, 0, sizeof(*t));
    t->spec = *spec;
    t->spec.name[sizeof(t->spec.name) - 1] = 0;
    if (!t->spec.va_base)
        t->spec.va_base = (uint64_t)(idx + 1) << 40;
    if (spec->n_ops) {
        t->op_time = dup_array(spec->op_time_ns, spec->n_ops, sizeof(uint64_t));
        t->first = dup_array(spec->op_first_touch, (size_t)spec->n_ops + 1, sizeof(uint32_t));
        t->touch = dup_array(spec->touch_chunk, spec->n_touches, sizeof(uint32_t));
        t->mode = dup_array(spec->touch_mode, spec->n_touches, sizeof(uint8_t));
        t->aop = dup_array(spec->chunk_alloc_op, spec->n_chunks, sizeof(int32_t));
        t->fop = dup_array(spec->chunk_free_op, spec->n_chunks, sizeof(int32_t));
        if (!t->op_time || !t->first || !t->touch || !t->mode || !t->aop || !t->fop ||
            build_csr(t->aop, spec->n_chunks, spec->n_ops, &t->alloc_first, &t->alloc_list) ||
            build_csr(t->fop, spec->n_chunks, spec->n_ops, &t->free_first, &t->free_list))
            goto nomem;
        for (c = 0, n = 0; c < spec->n_chunks; c++)
            n += t->aop[c] < 0;
        t->static_list = malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
        if (!t->static_list)
            goto nomem;
        for (c = 0; c < spec->n_chunks; c++) {
            if (t->aop[c] < 0)
                t->static_list[t->n_static++] = c;
        }
    } else {
        t->spec.n_chunks = 0;
        t->spec.n_touches = 0;
    }
    t->spec.op_time_ns = t->op_time;
    t->spec.op_first_touch = t->first;
    t->spec.touch_chunk = t->touch;
    t->spec.touch_mode = t->mode;
    t->spec.chunk_alloc_op = t->aop;
    t->spec.chunk_free_op = t->fop;
    t->foreground = t->spec.n_ops > 0 && t->spec.steps > 0;
    t->static_chunks = (spec->static_bytes + SIM_CHUNK - 1) / SIM_CHUNK;
    t->chunk_base = sim->n_chunks;
    if (t->spec.n_chunks) {
        chunks = realloc(sim->chunks, ((size_t)sim->n_chunks + t->spec.n_chunks) * sizeof(sim_chunk_t));
        if (!chunks)
            goto nomem;
        sim->chunks = chunks;
        for (c = 0; c < t->spec.n_chunks; c++) {
            sim_chunk_t *ch = &chunks[sim->n_chunks + c];

            memset(ch, 0, sizeof(*ch));
            ch->prev = ch->next = SIM_NIL;
            ch->owner = (uint8_t)spec->gpu;
            ch->tenant = idx;
        }
        sim->n_chunks += t->spec.n_chunks;
    }
    sim->n_tenants++;
    return (int32_t)idx;

nomem:
    tenant_free(t);
    sim_set_error(err, HUVM_NV_ERR_NO_MEMORY, -1, "tenant", "out of memory copying tenant %u", idx);
    return -1;
}

/* ---- the paging model ---- */

static void run_error(huvm_sim_t *sim, uint32_t status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void run_error(huvm_sim_t *sim, uint32_t status, const char *field, const char *fmt, ...)
{
    va_list ap;

    if (sim->failed)
        return;
    sim->failed = 1;
    sim->err.status = status;
    sim->err.record = -1;
    snprintf(sim->err.field, sizeof(sim->err.field), "%s", field);
    va_start(ap, fmt);
    vsnprintf(sim->err.message, sizeof(sim->err.message), fmt, ap);
    va_end(ap);
}

static void vacnt_add(huvm_sim_t *sim, uint32_t ci, int which)
{
    sim_vacnt_t *v = &sim->tenants[sim->chunks[ci].tenant].vacnt;

    switch (which) {
    case 0: v->evict_to_peer++; break;
    case 1: v->evict_to_host++; break;
    case 2: v->fetch_from_peer++; break;
    case 3: v->fetch_from_host++; break;
    default: v->prefetch++; break;
    }
}

static int host_take(huvm_sim_t *sim)
{
    if (sim->host_chunks >= sim->host_limit_chunks) {
        run_error(sim, HUVM_NV_ERR_NO_MEMORY, "host_memory_bytes",
                  "host memory is exhausted (%llu GiB evicted)", (unsigned long long)(sim->host_chunks / 512));
        return -1;
    }
    sim->host_chunks++;
    return 0;
}

/* Evict chunk ci (owner g's own, resident on g) where the core says. Returns when g can reuse the memory
 * (sync) or t (async: pre-eviction). */
static uint64_t evict_own(huvm_sim_t *sim, uint32_t g, uint32_t ci, uint64_t t, uint32_t flags, int sync)
{
    sim_chunk_t *c = &sim->chunks[ci];
    sim_gpu_t *gg = &sim->gpus[g];
    huvm_evict_request_t req;
    huvm_decision_t d;
    uint64_t start = u64_max(t, c->ready_ns), fin;

    refresh_state(sim);
    memset(&req, 0, sizeof(req));
    req.gpu = g;
    req.flags = flags;
    req.candidates = gg->candidates;
    req.now_ns = t;
    req.chunk_fetched_ns = c->fetched_ns;
    d = huvm_decide_evict(&sim->core, sim->state, &req);
    if (d.dst < sim->cfg.gpu_count && (d.dst == g || !(gg->candidates & (1u << d.dst)))) {
        /* Not a usable destination: the glue refuses it and goes to host. */
        d.dst = HUVM_DEST_HOST;
        d.reason = HUVM_REASON_NO_PEER;
    }
    if (d.dst < sim->cfg.gpu_count && gpu_free(&sim->gpus[d.dst]) == 0) {
        d.dst = HUVM_DEST_HOST;
        d.reason = HUVM_REASON_ALLOC_FAILED;
    }
    if (d.dst >= sim->cfg.gpu_count) {
        d.dst = HUVM_DEST_HOST;
        if (d.reason == HUVM_REASON_PEER)
            d.reason = HUVM_REASON_NO_PEER;
    }
    if (d.dst == HUVM_DEST_HOST && host_take(sim))
        return t;
    if (c->flags & SIM_CF_PREFETCHED)
        pf_note(sim, c, 0);
    list_remove(sim->chunks, &gg->own, ci);
    if (d.dst != HUVM_DEST_HOST) {
        uint32_t p = d.dst;

        fin = xfer_peer(sim, g, p, start, SIM_CHUNK, sync ? SIM_FG : SIM_BG, ci);
        lend_charge(sim, p, 1);
        list_push_tail(sim->chunks, &sim->gpus[p].guest[g], ci);
        sim->gpus[p].guest_chunks++;
        gg->peer_chunks++;
        c->holder = (uint8_t)p;
        vacnt_add(sim, ci, 0);
    } else {
        fin = xfer_d2h(sim, g, start, SIM_CHUNK, sync ? SIM_FG : SIM_BG, ci);
        c->loc = HUVM_SIM_LOC_HOST;
        gg->host_chunks++;
        vacnt_add(sim, ci, 1);
    }
    c->ready_ns = u64_max(c->ready_ns, fin);
    c->flags &= (uint8_t)~SIM_CF_REMOTE;
    gg->last_evict_ns = t ? t : 1;
    huvm_account_evict(&sim->core, g, d.dst, d.reason, flags & HUVM_EVICT_FLAG_PREEVICT, SIM_CHUNK,
                       chunk_va(sim, ci));
    return sync ? fin : t;
}

/* Holder h gives back one chunk of owner o to host (the owner's data, now in host memory). sync: the holder
 * waits for the copy (demand class); else a background copy (pre-eviction) and the memory is free at t. */
static uint64_t giveback_one(huvm_sim_t *sim, uint32_t h, uint32_t o, uint64_t t, int sync)
{
    sim_gpu_t *hg = &sim->gpus[h];
    uint32_t ci = hg->guest[o].head;
    sim_chunk_t *c = &sim->chunks[ci];
    uint64_t fin;

    if (host_take(sim))
        return t;
    if (c->flags & SIM_CF_PREFETCHED)
        pf_note(sim, c, 0);
    list_remove(sim->chunks, &hg->guest[o], ci);
    hg->guest_chunks--;
    sim->gpus[o].peer_chunks--;
    sim->gpus[o].host_chunks++;
    fin = xfer_d2h(sim, h, u64_max(t, c->ready_ns), SIM_CHUNK, sync ? SIM_FG : SIM_BG, ci);
    lend_charge(sim, h, 1);
    c->loc = HUVM_SIM_LOC_HOST;
    c->ready_ns = u64_max(c->ready_ns, fin);
    c->flags &= (uint8_t)~SIM_CF_REMOTE;
    huvm_account_giveback(&sim->core, h, o, SIM_CHUNK, chunk_va(sim, ci));
    return sync ? fin : t;
}

/* Make n chunks free on GPU g at time t: harvested chunks go first (give-back, to host), then g's own
 * chunks in LRU order (huvm_decide_evict). Returns the time the memory is usable, or t with sim->failed
 * set when nothing can be evicted. */
static uint64_t make_room(huvm_sim_t *sim, uint32_t g, uint64_t n, uint64_t t, uint32_t flags)
{
    sim_gpu_t *gg = &sim->gpus[g];
    uint64_t free_now;

    gpu_retire(sim, g, t);
    free_now = gpu_free(gg);
    /* Real pressure: this allocation has to evict, or would have to without the chunks pre-eviction freed
     * (those are used first, as the most recently freed; those still in flight count as theirs). Pre-evicted
     * chunks freed since are forgotten. */
    if (gg->preevicted > free_now + gg->inflight)
        gg->preevicted = free_now + gg->inflight;
    if (free_now < n + gg->preevicted && !(sim->cfg.flags & HUVM_SIM_FLAG_UNLIMITED))
        gg->last_pressure_ns = t ? t : 1;
    gg->preevicted -= u64_min(gg->preevicted, n);
    while (gpu_free(gg) < n && !sim->failed) {
        uint64_t need = n - gpu_free(gg);

        if (gg->inflight) {
            /* Memory still held by copies in flight: wait for the first of them, unless a synchronous
             * eviction (demand class, half its link at worst) would free a chunk sooner. */
            uint64_t next = gpu_inflight_next(sim, g);
            uint64_t sync = t + 2 * ((SIM_CHUNK * 1000 + gg->d2h.mbyte_per_s - 1) / gg->d2h.mbyte_per_s) +
                            gg->d2h.latency_ns;

            if (next <= sync) {
                t = u64_max(t, next);
                gpu_retire(sim, g, t);
                continue;
            }
        }
        if (gg->guest_chunks) {
            huvm_giveback_plan_t plan;
            uint32_t o, k, done = 0;

            refresh_state(sim);
            memset(&plan, 0, sizeof(plan));
            huvm_decide_giveback(&sim->core, sim->state, g, need * SIM_CHUNK, &plan);
            for (o = 0; o < sim->cfg.gpu_count; o++) {
                for (k = 0; k < plan.guest_chunks[o] && gg->guest[o].count; k++) {
                    t = giveback_one(sim, g, o, t, 1);
                    done++;
                }
            }
            if (done)
                continue;
            if (!gg->own.count) {
                /* The core gave nothing back but nothing else is evictable: harvested data must go. */
                for (o = 0; o < sim->cfg.gpu_count && !gg->guest[o].count; o++)
                    ;
                t = giveback_one(sim, g, o, t, 1);
                continue;
            }
        }
        if (gg->own.count) {
            t = evict_own(sim, g, gg->own.head, t, flags, 1);
            continue;
        }
        run_error(sim, HUVM_NV_ERR_NO_MEMORY, "tenants", "GPU %u is out of memory: %llu MiB are pinned by "
                  "cudaMalloc and nothing is evictable", g, (unsigned long long)(gg->pinned_chunks * 2));
        break;
    }
    return t;
}

static void preevict(huvm_sim_t *sim, uint32_t g, uint64_t t)
{
    sim_gpu_t *gg = &sim->gpus[g];
    huvm_giveback_plan_t plan;
    uint32_t n, o, k;

    if (sim->cfg.flags & HUVM_SIM_FLAG_UNLIMITED)
        return;
    refresh_state(sim);
    huvm_decide_preevict_plan(&sim->core, sim->state, g, t, &plan);
    /* Guests' chunks first (a lender's own data never leaves ahead of a guest's), then its own. */
    for (o = 0; o < sim->cfg.gpu_count && !sim->failed; o++) {
        for (k = 0; k < plan.guest_chunks[o] && gg->guest[o].count && !sim->failed; k++) {
            giveback_one(sim, g, o, t, 0);
            gg->preevicted++;
        }
    }
    for (n = 0; n < plan.own_chunks && gg->own.count && !sim->failed; n++) {
        evict_own(sim, g, gg->own.head, t, HUVM_EVICT_FLAG_PREEVICT, 0);
        gg->preevicted++;
    }
    gg->preevicted = u64_min(gg->preevicted, gpu_free(gg) + gg->inflight);
}

/* After a fault brought chunk ci of tenant tt from host: ask the core for a prefetch plan and start it. */
static void prefetch(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t ci, uint64_t t)
{
    uint32_t g = tt->spec.gpu;
    huvm_prefetch_plan_t plan;
    uint32_t stride, k, span, local_done = 0, peer_done = 0, local_cnt, back_done = 0;
    uint32_t idx = ci - tt->chunk_base;

    refresh_state(sim);
    memset(&plan, 0, sizeof(plan));
    plan.peer = HUVM_DEST_HOST;
    huvm_decide_prefetch(&sim->core, sim->state, g, sim->gpus[g].candidates, t, &plan);
    if (!plan.local_chunks && !plan.peer_chunks && !plan.peer_local_chunks)
        return;
    stride = plan.stride ? plan.stride : 1;
    if (plan.peer >= sim->cfg.gpu_count || plan.peer == g || !(sim->gpus[g].candidates & (1u << plan.peer)))
        plan.peer_chunks = 0;
    local_cnt = plan.local_chunks;
    span = plan.local_chunks + plan.peer_chunks;
    if (plan.peer_local_chunks > span)
        span = plan.peer_local_chunks;
    for (k = 1; k <= span; k++) {
        uint64_t pos = (uint64_t)idx + (uint64_t)k * stride;
        uint32_t pci;
        sim_chunk_t *c;

        if (pos >= tt->spec.n_chunks)
            break;
        pci = tt->chunk_base + (uint32_t)pos;
        c = &sim->chunks[pci];
        if (c->loc == HUVM_SIM_LOC_GPU && c->holder != g && !(c->flags & SIM_CF_REMOTE) &&
            back_done < plan.peer_local_chunks) {
            /* Two-stage prefetch: a chunk of the window held by a peer comes back ahead of its fault. */
            uint32_t p = c->holder;

            if (gpu_free(&sim->gpus[g]) == 0) {
                back_done = plan.peer_local_chunks;     /* no room: the rest of this part is dropped */
                continue;
            }
            list_remove(sim->chunks, &sim->gpus[p].guest[g], pci);
            sim->gpus[p].guest_chunks--;
            sim->gpus[g].peer_chunks--;
            c->ready_ns = xfer_peer(sim, p, g, u64_max(t, c->ready_ns), SIM_CHUNK, SIM_BG, pci);
            lend_charge(sim, p, 1);
            c->holder = (uint8_t)g;
            c->fetched_ns = c->ready_ns;
            c->flags |= SIM_CF_PREFETCHED;
            list_push_tail(sim->chunks, &sim->gpus[g].own, pci);
            sim->gpus[g].batch_allocs++;
            back_done++;
            vacnt_add(sim, pci, 2);
            huvm_account_fetch(&sim->core, g, p, 0, SIM_CHUNK, chunk_va(sim, pci));
            continue;
        }
        if (c->loc != HUVM_SIM_LOC_HOST || !(c->flags & SIM_CF_LIVE))
            continue;
        if (local_done < local_cnt) {
            sim_gpu_t *gg = &sim->gpus[g];

            if (gpu_free(gg) == 0) {
                local_done = local_cnt;     /* no room: the rest of the local part is dropped */
                continue;
            }
            sim->host_chunks--;
            gg->host_chunks--;
            c->ready_ns = xfer_h2d(sim, g, u64_max(t, c->ready_ns), SIM_CHUNK, SIM_BG, pci);
            c->loc = HUVM_SIM_LOC_GPU;
            c->holder = (uint8_t)g;
            list_push_tail(sim->chunks, &gg->own, pci);
            c->flags |= SIM_CF_PREFETCHED;
            gg->batch_allocs++;             /* the prefetched chunk takes memory of this batch too */
            local_done++;
            vacnt_add(sim, pci, 4);
            huvm_account_prefetch(&sim->core, g, g, SIM_CHUNK, chunk_va(sim, pci));
        } else if (peer_done < plan.peer_chunks) {
            uint32_t p = plan.peer;
            sim_gpu_t *pg = &sim->gpus[p];

            refresh_state(sim);
            if (gpu_free(pg) == 0 ||
                huvm_admit_lend(&sim->core, sim->state, g, p, SIM_CHUNK, t) != HUVM_REASON_PEER) {
                peer_done = plan.peer_chunks;   /* the peer is full: the rest of the host part is dropped */
                continue;
            }
            sim->host_chunks--;
            sim->gpus[g].host_chunks--;
            sim->gpus[g].peer_chunks++;
            c->ready_ns = xfer_h2d(sim, p, u64_max(t, c->ready_ns), SIM_CHUNK, SIM_BG, pci);
            lend_charge(sim, p, 1);
            c->loc = HUVM_SIM_LOC_GPU;
            c->holder = (uint8_t)p;
            list_push_tail(sim->chunks, &pg->guest[g], pci);
            c->flags |= SIM_CF_PREFETCHED;
            pg->guest_chunks++;
            peer_done++;
            vacnt_add(sim, pci, 4);
            huvm_account_prefetch(&sim->core, g, p, SIM_CHUNK, chunk_va(sim, pci));
        } else if (back_done >= plan.peer_local_chunks) {
            break;
        }
    }
}

/* Service one faulted chunk of tenant tt at time t; returns the time the tenant can go on. *remote is set
 * when the core chose to map the peer's copy instead (the touch then runs over NVLink). */
static uint64_t service_fault(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t ci, uint64_t t, int *remote)
{
    sim_chunk_t *c = &sim->chunks[ci];
    uint32_t g = tt->spec.gpu;
    sim_gpu_t *gg = &sim->gpus[g];

    *remote = 0;
    t += c->loc == HUVM_SIM_LOC_GPU ? sim->cfg.peer_fault_service_ns : sim->cfg.fault_service_ns;
    if (c->flags & SIM_CF_PREFETCHED)
        pf_note(sim, c, 1);             /* prefetched to a peer, and wanted: the prefetch paid */
    if (c->loc == HUVM_SIM_LOC_GPU) {
        uint32_t p = c->holder;
        uint64_t fin;

        if (huvm_decide_fetch(&sim->core, g, p) == HUVM_FETCH_REMOTE_MAP) {
            c->flags |= SIM_CF_REMOTE;
            *remote = 1;
            huvm_account_fetch(&sim->core, g, p, 1, SIM_CHUNK, chunk_va(sim, ci));
            return u64_max(t, c->ready_ns);
        }
        gg->batch_allocs++;
        t = make_room(sim, g, 1, t, 0);
        if (sim->failed)
            return t;
        fin = xfer_peer(sim, p, g, u64_max(t, c->ready_ns), SIM_CHUNK, SIM_FG, ci);
        lend_charge(sim, p, 1);
        list_remove(sim->chunks, &sim->gpus[p].guest[g], ci);
        sim->gpus[p].guest_chunks--;
        gg->peer_chunks--;
        list_push_tail(sim->chunks, &gg->own, ci);
        c->holder = (uint8_t)g;
        c->ready_ns = fin;
        c->fetched_ns = fin;
        vacnt_add(sim, ci, 2);
        huvm_account_fetch(&sim->core, g, p, 0, SIM_CHUNK, chunk_va(sim, ci));
        if (sim->core.policy.prefetch_mode == HUVM_PREFETCH_TWO_STAGE ||
            sim->core.policy.prefetch_mode == HUVM_PREFETCH_LOCAL)
            prefetch(sim, tt, ci, t);       /* the prototype prefetches after every fault batch */
        return fin;
    }
    gg->batch_allocs++;
    t = make_room(sim, g, 1, t, 0);
    if (sim->failed)
        return t;
    if (c->loc == HUVM_SIM_LOC_HOST) {
        uint64_t fin = xfer_h2d(sim, g, u64_max(t, c->ready_ns), SIM_CHUNK, SIM_FG, ci);

        sim->host_chunks--;
        gg->host_chunks--;
        c->loc = HUVM_SIM_LOC_GPU;
        c->holder = (uint8_t)g;
        c->ready_ns = fin;
        list_push_tail(sim->chunks, &gg->own, ci);
        vacnt_add(sim, ci, 3);
        huvm_account_fetch(&sim->core, g, HUVM_DEST_HOST, 0, SIM_CHUNK, chunk_va(sim, ci));
        prefetch(sim, tt, ci, t);
        return fin;
    }
    /* First touch: populate a zeroed chunk. */
    t += sim->cfg.populate_ns;
    c->loc = HUVM_SIM_LOC_GPU;
    c->holder = (uint8_t)g;
    c->ready_ns = t;
    list_push_tail(sim->chunks, &gg->own, ci);
    tt->res.first_touches++;
    return t;
}

/* Allocate a cudaMalloc (pinned) chunk: room is made in PMA context (never to peers). */
static uint64_t pin_chunk(huvm_sim_t *sim, uint32_t g, uint32_t ci, uint64_t t)
{
    t = make_room(sim, g, 1, t, HUVM_EVICT_FLAG_PMA_CONTEXT);
    if (sim->failed)
        return t;
    sim->gpus[g].pinned_chunks++;
    note_own(sim, g, t);
    if (ci != SIM_NIL) {
        sim_chunk_t *c = &sim->chunks[ci];

        c->loc = HUVM_SIM_LOC_GPU;
        c->holder = (uint8_t)g;
        c->flags |= SIM_CF_PINNED;
        c->ready_ns = t;
    }
    return t;
}

static void make_live(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t ci, uint64_t *t)
{
    sim_chunk_t *c = &sim->chunks[ci];

    if (c->flags & SIM_CF_LIVE)
        return;
    c->flags |= SIM_CF_LIVE;
    if (!tt->spec.managed)
        *t = pin_chunk(sim, tt->spec.gpu, ci, *t);
}

static void release_chunk(huvm_sim_t *sim, uint32_t ci)
{
    sim_chunk_t *c = &sim->chunks[ci];
    uint32_t o = c->owner;

    if (!(c->flags & SIM_CF_LIVE))
        return;
    if (c->flags & SIM_CF_PREFETCHED)
        pf_note(sim, c, 0);
    if (c->loc == HUVM_SIM_LOC_GPU) {
        if (c->flags & SIM_CF_PINNED) {
            sim->gpus[o].pinned_chunks--;
        } else if (c->holder == o) {
            list_remove(sim->chunks, &sim->gpus[o].own, ci);
        } else {
            /* Harvested data freed by its owner: the peer's chunk is simply released (no copy); the core's
             * held/lent/harvested gauges go down with it. */
            list_remove(sim->chunks, &sim->gpus[c->holder].guest[o], ci);
            sim->gpus[c->holder].guest_chunks--;
            sim->gpus[o].peer_chunks--;
            huvm_account_release(&sim->core, o, c->holder, SIM_CHUNK, chunk_va(sim, ci));
        }
    } else if (c->loc == HUVM_SIM_LOC_HOST) {
        sim->host_chunks--;
        sim->gpus[o].host_chunks--;
    }
    c->loc = HUVM_SIM_LOC_NONE;
    c->flags = 0;
    c->ready_ns = 0;
}

static void end_batch(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t nb, uint64_t t)
{
    sim_gpu_t *gg = &sim->gpus[tt->spec.gpu];

    gg->burst_chunks = gg->batch_allocs;
    gg->batch_allocs = 0;
    note_own(sim, tt->spec.gpu, t);
    huvm_account_faults(&sim->core, tt->spec.gpu, nb * sim->cfg.faults_per_chunk);
    tt->res.fault_batches++;
    preevict(sim, tt->spec.gpu, t);
}

static void tenant_start(huvm_sim_t *sim, sim_tenant_t *tt)
{
    uint64_t t = tt->clock, k;
    uint32_t i;

    tt->res.start_ns = tt->clock;
    for (k = 0; k < tt->static_chunks && !sim->failed; k++)
        t = pin_chunk(sim, tt->spec.gpu, SIM_NIL, t);
    for (i = 0; i < tt->n_static && !sim->failed; i++)
        make_live(sim, tt, tt->chunk_base + tt->static_list[i], &t);
    tt->res.alloc_stall_ns += t - tt->clock;
    tt->clock = t;
    tt->step_start = t;
    if (tt->spec.n_ops == 0) {
        tt->state = SIM_T_DONE;
        tt->res.done = 1;
        tt->res.end_ns = t;
    } else {
        tt->state = SIM_T_RUNNING;
    }
}

static void run_op(huvm_sim_t *sim, sim_tenant_t *tt)
{
    const uint32_t g = tt->spec.gpu, base = tt->chunk_base, op = tt->op;
    sim_chunk_t *const ch = sim->chunks;
    const uint32_t *touch = tt->touch;
    uint64_t t = tt->clock, fault_start, compute_end, end;
    uint64_t remote_bytes[HUVM_SIM_MAX_GPUS];
    uint32_t remote_mask = 0, nb = 0, i, e;

    /* Step start: chunks live before the window are live again (a freed static buffer comes back). */
    if (op == 0 && tt->res.steps_done > 0) {
        for (i = 0; i < tt->n_static && !sim->failed; i++)
            make_live(sim, tt, base + tt->static_list[i], &t);
    }
    for (i = tt->alloc_first[op]; i < tt->alloc_first[op + 1] && !sim->failed; i++)
        make_live(sim, tt, base + tt->alloc_list[i], &t);
    tt->res.alloc_stall_ns += t - tt->clock;
    if (sim->gpus[g].lend_debt_ns) {
        /* Guests' copies in this GPU's memory since its last op took HBM time from it. */
        t += sim->gpus[g].lend_debt_ns;
        tt->res.lend_stall_ns += sim->gpus[g].lend_debt_ns;
        sim->gpus[g].lend_debt_ns = 0;
    }
    fault_start = t;
    for (i = tt->first[op], e = tt->first[op + 1]; i < e; i++) {
        const uint32_t ci = base + touch[i];
        sim_chunk_t *c = &ch[ci];
        int remote;

        if (c->loc == HUVM_SIM_LOC_GPU) {
            if (c->holder == g) {
                if (c->flags & SIM_CF_PREFETCHED)
                    pf_note(sim, c, 1);
                if (c->ready_ns > t) {
                    tt->res.inflight_wait_ns += c->ready_ns - t;
                    t = c->ready_ns;
                }
                continue;
            }
            if (c->flags & SIM_CF_REMOTE) {
                remote_bytes[c->holder] = (remote_mask & (1u << c->holder)) ? remote_bytes[c->holder] + SIM_CHUNK :
                                          SIM_CHUNK;
                remote_mask |= 1u << c->holder;
                tt->res.remote_touches++;
                continue;
            }
        }
        if (sim->failed)
            break;
        if (nb == 0)
            t += sim->cfg.fault_batch_ns;
        t = service_fault(sim, tt, ci, t, &remote);
        tt->res.faults++;
        if (remote) {
            remote_bytes[c->holder] = (remote_mask & (1u << c->holder)) ? remote_bytes[c->holder] + SIM_CHUNK :
                                      SIM_CHUNK;
            remote_mask |= 1u << c->holder;
            tt->res.remote_touches++;
        }
        if (++nb == sim->cfg.fault_batch_max) {
            end_batch(sim, tt, nb, t);
            nb = 0;
        }
    }
    if (nb)
        end_batch(sim, tt, nb, t);
    tt->res.touches += tt->first[op + 1] - tt->first[op];
    tt->res.fault_stall_ns += t - fault_start;
    compute_end = t + tt->op_time[op];
    end = compute_end;
    if (remote_mask) {
        uint32_t h;

        for (h = 0; h < sim->cfg.gpu_count; h++) {
            if (remote_mask & (1u << h)) {
                sim->traffic.remote_read[h][g] += remote_bytes[h];
                end = u64_max(end, xfer_peer_raw(sim, h, g, t, remote_bytes[h], SIM_FG, SIM_NIL));
                lend_charge(sim, h, remote_bytes[h] / SIM_CHUNK);
            }
        }
        tt->res.remote_stall_ns += end - compute_end;
    }
    tt->res.compute_ns += tt->op_time[op];
    for (i = tt->free_first[op]; i < tt->free_first[op + 1]; i++)
        release_chunk(sim, base + tt->free_list[i]);
    tt->clock = end;
    tt->res.ops_done++;
    if (!sim->failed && tt->res.fault_batches)
        preevict(sim, g, end);
    if (++tt->op == tt->spec.n_ops) {
        tt->op = 0;
        tt->res.steps_done++;
        if (tt->step_end_n == tt->step_end_cap) {
            uint32_t cap = tt->step_end_cap ? tt->step_end_cap * 2 : 16;
            uint64_t *p = realloc(tt->step_end, (size_t)cap * sizeof(uint64_t));

            if (p) {
                tt->step_end = p;
                tt->step_end_cap = cap;
            }
        }
        if (tt->step_end_n < tt->step_end_cap)
            tt->step_end[tt->step_end_n++] = end;
        if (tt->foreground && tt->res.steps_done == tt->spec.steps) {
            tt->state = SIM_T_DONE;
            tt->res.done = 1;
            tt->res.end_ns = end;
            sim->fg_remaining--;
        } else if (!tt->foreground && end == tt->step_start) {
            /* A background trace whose step takes no time would loop forever at one instant: it is done. */
            tt->state = SIM_T_DONE;
            tt->res.done = 1;
            tt->res.end_ns = end;
        }
        tt->step_start = end;
    }
}

/* ---- samples ---- */

static void take_sample(huvm_sim_t *sim, uint64_t at)
{
    huvm_sim_sample_t *s;
    uint32_t g;

    if (sim->n_samples == sim->samples_cap) {
        uint32_t cap = sim->samples_cap ? sim->samples_cap * 2 : 64;
        huvm_sim_sample_t *p;

        if (cap > sim->cfg.max_samples)
            cap = sim->cfg.max_samples;
        if (sim->n_samples >= cap) {
            /* Thin 2:1 and double the period: samples stay at multiples of the period. */
            uint32_t i, n = 0;

            for (i = 0; i < sim->n_samples; i++) {
                if ((sim->samples[i].t_ns / sim->sample_interval) % 2 == 0)
                    sim->samples[n++] = sim->samples[i];
            }
            sim->n_samples = n;
            sim->sample_interval *= 2;
            if (at % sim->sample_interval)
                return;
        } else {
            p = realloc(sim->samples, (size_t)cap * sizeof(*p));
            if (!p)
                return;
            sim->samples = p;
            sim->samples_cap = cap;
        }
    }
    s = &sim->samples[sim->n_samples++];
    memset(s, 0, sizeof(*s));
    s->t_ns = at;
    for (g = 0; g < sim->cfg.gpu_count; g++) {
        const sim_gpu_t *gg = &sim->gpus[g];

        s->own_bytes[g] = (gg->own.count + gg->pinned_chunks) * SIM_CHUNK;
        s->guest_bytes[g] = gg->guest_chunks * SIM_CHUNK;
        s->free_bytes[g] = (sim->cfg.flags & HUVM_SIM_FLAG_UNLIMITED) ? 0 : gpu_free(gg) * SIM_CHUNK;
        s->peer_bytes[g] = gg->peer_chunks * SIM_CHUNK;
        s->host_bytes[g] = gg->host_chunks * SIM_CHUNK;
    }
}

static void sample_until(huvm_sim_t *sim, uint64_t t)
{
    if (!sim->sample_interval)
        return;
    while (sim->next_sample <= t) {
        take_sample(sim, sim->next_sample);
        sim->next_sample = (sim->next_sample / sim->sample_interval + 1) * sim->sample_interval;
    }
}

/* ---- the loop ---- */

uint32_t huvm_sim_run(huvm_sim_t *sim, uint64_t until_ns, huvm_sim_error_t *err)
{
    uint32_t i;

    if (err)
        memset(err, 0, sizeof(*err));
    if (!sim) {
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, "sim", "no simulator");
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (sim->failed)
        goto failed;
    if (!sim->started) {
        sim->started = 1;
        for (i = 0; i < sim->n_tenants; i++) {
            sim_tenant_t *tt = &sim->tenants[i];

            tt->state = SIM_T_PENDING;
            tt->clock = tt->spec.start_ns;
            sim->fg_remaining += tt->foreground;
        }
    }
    for (;;) {
        sim_tenant_t *best = NULL;
        uint64_t bc = UINT64_MAX;

        for (i = 0; i < sim->n_tenants; i++) {
            sim_tenant_t *tt = &sim->tenants[i];

            if (tt->state == SIM_T_DONE)
                continue;
            if (tt->state == SIM_T_RUNNING && !sim->fg_remaining)
                continue;       /* background tenants stop with the last foreground one */
            if (tt->clock < bc) {
                bc = tt->clock;
                best = tt;
            }
        }
        if (!best || bc >= until_ns)
            break;
        sample_until(sim, bc);
        if (bc > sim->now)
            sim->now = bc;
        if (best->state == SIM_T_PENDING)
            tenant_start(sim, best);
        else
            run_op(sim, best);
        if (sim->failed)
            goto failed;
    }
    for (i = 0; i < sim->n_tenants; i++) {
        sim_tenant_t *tt = &sim->tenants[i];

        if (tt->state != SIM_T_PENDING && tt->clock > sim->now)
            sim->now = tt->clock;
    }
    if (!sim->fg_remaining)
        sample_until(sim, sim->now);
    return HUVM_NV_OK;

failed:
    if (err)
        *err = sim->err;
    return sim->err.status;
}

uint32_t huvm_sim_finished(const huvm_sim_t *sim)
{
    return sim && sim->started && sim->fg_remaining == 0 && !sim->failed;
}

uint64_t huvm_sim_now(const huvm_sim_t *sim)
{
    return sim ? sim->now : 0;
}

/* ---- results ---- */

uint32_t huvm_sim_tenant_count(const huvm_sim_t *sim)
{
    return sim ? sim->n_tenants : 0;
}

uint32_t huvm_sim_tenant_result(const huvm_sim_t *sim, uint32_t tenant, huvm_sim_tenant_result_t *out)
{
    const sim_tenant_t *tt;
    uint32_t c;

    if (!sim || !out || tenant >= sim->n_tenants)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    tt = &sim->tenants[tenant];
    *out = tt->res;
    out->resident_chunks = out->peer_chunks = out->host_chunks = 0;
    for (c = 0; c < tt->spec.n_chunks; c++) {
        const sim_chunk_t *ch = &sim->chunks[tt->chunk_base + c];

        if (ch->loc == HUVM_SIM_LOC_GPU && ch->holder == ch->owner)
            out->resident_chunks++;
        else if (ch->loc == HUVM_SIM_LOC_GPU)
            out->peer_chunks++;
        else if (ch->loc == HUVM_SIM_LOC_HOST)
            out->host_chunks++;
    }
    if (tt->state == SIM_T_DONE)
        out->runtime_ns = tt->res.end_ns - tt->res.start_ns;
    else if (tt->state == SIM_T_RUNNING)
        out->runtime_ns = tt->clock - tt->res.start_ns;
    else
        out->runtime_ns = 0;
    return HUVM_NV_OK;
}

uint32_t huvm_sim_tenant_steps(const huvm_sim_t *sim, uint32_t tenant, uint64_t *out, uint32_t n)
{
    const sim_tenant_t *tt;
    uint32_t k;

    if (!sim || tenant >= sim->n_tenants || (!out && n))
        return 0;
    tt = &sim->tenants[tenant];
    k = tt->step_end_n < n ? tt->step_end_n : n;
    if (k)
        memcpy(out, tt->step_end, (size_t)k * sizeof(uint64_t));
    return k;
}

void huvm_sim_traffic(const huvm_sim_t *sim, huvm_sim_traffic_t *out)
{
    uint32_t a, b;

    if (!sim || !out)
        return;
    *out = sim->traffic;
    for (a = 0; a < sim->cfg.gpu_count; a++) {
        out->pcie_h2d_busy_ns[a] = sim->gpus[a].h2d.busy_ns;
        out->pcie_d2h_busy_ns[a] = sim->gpus[a].d2h.busy_ns;
        if (sim->cfg.flags & HUVM_SIM_FLAG_NVSWITCH) {
            out->nvlink_busy_ns[a][a] = sim->gpus[a].port_out.busy_ns;
        } else {
            for (b = 0; b < sim->cfg.gpu_count; b++)
                out->nvlink_busy_ns[a][b] = sim->nvl[a][b].busy_ns;
        }
    }
}

uint32_t huvm_sim_sample_count(const huvm_sim_t *sim)
{
    return sim ? sim->n_samples : 0;
}

uint32_t huvm_sim_samples(const huvm_sim_t *sim, huvm_sim_sample_t *out, uint32_t n)
{
    uint32_t k;

    if (!sim || (!out && n))
        return 0;
    k = sim->n_samples < n ? sim->n_samples : n;
    if (k)
        memcpy(out, sim->samples, (size_t)k * sizeof(*out));
    return k;
}

uint32_t huvm_sim_chunk_where(const huvm_sim_t *sim, uint32_t tenant, uint32_t chunk, uint32_t *holder)
{
    const sim_chunk_t *c;

    if (holder)
        *holder = HUVM_DEST_HOST;
    if (!sim || tenant >= sim->n_tenants || chunk >= sim->tenants[tenant].spec.n_chunks)
        return HUVM_SIM_LOC_NONE;
    c = &sim->chunks[sim->tenants[tenant].chunk_base + chunk];
    if (c->loc == HUVM_SIM_LOC_GPU && holder)
        *holder = c->holder;
    return c->loc;
}

uint32_t huvm_sim_check(const huvm_sim_t *sim, huvm_sim_error_t *err)
{
    uint64_t own[HUVM_SIM_MAX_GPUS] = {0}, guest[HUVM_SIM_MAX_GPUS] = {0}, peer[HUVM_SIM_MAX_GPUS] = {0};
    uint64_t host[HUVM_SIM_MAX_GPUS] = {0}, pinned[HUVM_SIM_MAX_GPUS] = {0}, host_total = 0;
    uint32_t bad = 0, c, g, o;

    if (err)
        memset(err, 0, sizeof(*err));
    if (!sim)
        return 1;
    for (c = 0; c < sim->n_chunks; c++) {
        const sim_chunk_t *ch = &sim->chunks[c];

        if (ch->loc == HUVM_SIM_LOC_GPU) {
            if (ch->flags & SIM_CF_PINNED)
                pinned[ch->owner]++;
            else if (ch->holder == ch->owner)
                own[ch->owner]++;
            else {
                guest[ch->holder]++;
                peer[ch->owner]++;
            }
        } else if (ch->loc == HUVM_SIM_LOC_HOST) {
            host[ch->owner]++;
            host_total++;
        }
        if (ch->loc != HUVM_SIM_LOC_NONE && !(ch->flags & SIM_CF_LIVE)) {
            bad++;
            sim_set_error(err, HUVM_NV_ERR_INVALID_STATE, (int32_t)c, "chunks", "chunk %u is placed but not live", c);
        }
    }
    for (c = 0; c < sim->n_tenants; c++)
        pinned[sim->tenants[c].spec.gpu] += sim->tenants[c].state != SIM_T_PENDING ? sim->tenants[c].static_chunks : 0;
    for (g = 0; g < sim->cfg.gpu_count; g++) {
        const sim_gpu_t *gg = &sim->gpus[g];
        uint64_t gsum = 0;

        for (o = 0; o < sim->cfg.gpu_count; o++)
            gsum += gg->guest[o].count;
        if (own[g] != gg->own.count || guest[g] != gg->guest_chunks || gsum != gg->guest_chunks ||
            peer[g] != gg->peer_chunks || host[g] != gg->host_chunks || pinned[g] != gg->pinned_chunks ||
            gpu_used(gg) + gg->inflight > gg->capacity_chunks) {
            bad++;
            sim_set_error(err, HUVM_NV_ERR_INVALID_STATE, (int32_t)g, "gpus",
                          "GPU %u: chunk counts disagree with the chunk states (own %u)", g,
                          (uint32_t)gg->own.count);
        }
    }
    if (host_total != sim->host_chunks) {
        bad++;
        sim_set_error(err, HUVM_NV_ERR_INVALID_STATE, -1, "host", "host chunk count disagrees (%u)",
                      (uint32_t)host_total);
    }
    return bad;
}
