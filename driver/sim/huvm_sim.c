/*
 * huvm: simulated node, creation, the paging model and the event loop. SPDX-License-Identifier: MIT
 *
 * The loop runs ops, not touches: it always advances the tenant with the smallest clock (ties: lowest
 * index) by one op. An op makes its allocations live, walks its chunk touches (a resident chunk costs
 * nothing; the rest fault, in batches of fault_batch_max), computes for its op time (remote-mapped accesses
 * run concurrently over NVLink), then frees. Faults stall the tenant; prefetch and pre-eviction only occupy
 * links. Decisions: huvm_decide_*; movements: huvm_account_* (counters + USDT probes).
 *
 * The other sources: huvm_sim_xfer.c (links and transfers), huvm_sim_tenant.c (tenants, running an op),
 * huvm_sim_sample.c (samples, results), huvm_sim_node.c (defaults, validation), huvm_sim_ioctl.c (dispatch).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "huvm_sim_internal.h"

/* The decisions' view of the GPUs in mask (huvm_gpu_state_t), at sim->now.
 *
 * refresh_state(sim) refreshes every GPU. A caller that refreshed all of them at this sim->now and since then
 * changed only some GPUs (their chunk lists, copies out of them, their pair counters as holders) may refresh
 * just those (refresh_gpus): for the others, the copies in flight were already retired at sim->now (a copy that
 * frees a GPU's memory is only issued by a move out of it), and the guest-traffic window is idempotent at the
 * same time and counter total, so their state would come out the same. The simulated clock only moves in the
 * loop of huvm_sim_run, between ops and between the touches of an op that yields (sim_run_op). */
static SIM_ALWAYS_INLINE void note_own_at(sim_gpu_t *gg, huvm_gpu_state_t *st, uint64_t now, uint64_t own)
{
    if (gg->noted_ns != now + 1 || gg->noted_own != own) {
        huvm_peak_update(&gg->own_peak, own, now);
        st->own_peak_bytes = gg->own_peak.bytes;
        st->own_spike_ns = huvm_peak_spike_ns(&gg->own_peak, now);
        gg->noted_ns = now + 1;
        gg->noted_own = own;
    }
}

static SIM_ALWAYS_INLINE void refresh_own(sim_gpu_t *gg, huvm_gpu_state_t *st, uint64_t now)
{
    /* the own peak and spike cadence noted at every decision, as the kernel does (not only on the GPU's own
     * allocations: a peak older than its window gives way then too); at the same sim->now and own use, noting
     * again changes nothing (refresh_gpus's partial refresh relies on it) */
    note_own_at(gg, st, now, (gg->own.count + gg->pinned_chunks) * SIM_CHUNK);
}

static SIM_ALWAYS_INLINE void refresh_gpus(huvm_sim_t *sim, uint32_t mask)
{
    const uint64_t now = sim->now;
    const uint32_t n = sim->cfg.gpu_count, budgets = sim->traffic_mask;
    sim_gpu_t *gg = sim->gpus;
    huvm_gpu_state_t *st = sim->state;
    uint32_t g;

    /* A budget is paced (huvm_traffic_level): its GPUs read their traffic at the decision's own time, which
     * moves within an op (the copies of a fault batch are issued one after another, as in the kernel), so
     * they are refreshed at every decision. */
    if (sim->decide_ns > now)
        mask |= budgets;

    for (g = 0; g < n; g++, gg++, st++) {
        uint64_t used, inflight;

        if (!(mask & (1u << g)))
            continue;
        sim_gpu_retire(sim, g, now);
        /* Memory a copy still in flight will free counts as free for the decisions (pre-eviction does not
         * free it twice); an allocation waits for it (make_room). As gpu_free(gg) + gg->inflight. */
        inflight = gg->inflight;
        used = gpu_used(gg) + inflight;
        st->free_bytes = ((used < gg->capacity_chunks ? gg->capacity_chunks - used : 0) + inflight) * SIM_CHUNK;
        st->last_evict_ns = gg->last_evict_ns;
        st->last_pressure_ns = gg->last_pressure_ns;
        st->burst_chunks = gg->burst_chunks;
        refresh_own(gg, st, now);
        st->prefetch_used = gg->pf_used;
        st->prefetch_unused = gg->pf_unused;
        /* huvm_traffic_level's answer without a guest-traffic budget: 0 (its window was started over when the
         * run started, note_traffic_budgets) */
        if (budgets & (1u << g)) {
            gg->traffic_ns = u64_max(gg->traffic_ns, u64_max(now, sim->decide_ns));
            st->guest_traffic_bytes = huvm_traffic_level(&sim->core, g, &gg->guest_traffic, gg->traffic_ns);
        }
        else {
            st->guest_traffic_bytes = 0;
        }
    }
}

static void refresh_state(huvm_sim_t *sim)
{
    refresh_gpus(sim, ~0u);
}

/* The GPUs whose policy entry has a guest-traffic budget (huvm_traffic_level sums their pair counters). The
 * policy only changes between runs (huvm_sim_ioctl), so huvm_sim_run notes them when it starts. The others'
 * windows start over here, as huvm_traffic_level would start them over at each refresh (nothing else reads
 * or writes them). */
static void note_traffic_budgets(huvm_sim_t *sim)
{
    uint32_t g;

    sim->traffic_mask = 0;
    for (g = 0; g < sim->cfg.gpu_count; g++) {
        const huvm_gpu_policy_t *e = huvm_policy_gpu(&sim->core, g);

        if (e && e->lend_traffic_mbyte_per_s != 0)
            sim->traffic_mask |= 1u << g;
        else
            memset(&sim->gpus[g].guest_traffic, 0, sizeof(sim->gpus[g].guest_traffic));
    }
}

/* ---- creation ---- */

/* What GPU g's slowdown bound weighs, from the cost model: its HBM bandwidth (a guest chunk's copy costs its
 * tenants lend_chunk_ns) and its give-back rate (a chunk to the host: evict_service_ns, the transfer setup
 * and the copy at the PCIe rate, twice: a give-back is a demand copy, and the link it takes gives it half its
 * rate while background copies share it, as they do when a lender's spike returns), both in MB/s (bytes per
 * us). */
static void sim_set_gpu_rates(huvm_sim_t *sim, uint32_t g)
{
    const huvm_sim_config_t *cfg = &sim->cfg;
    uint64_t us_bytes = (uint64_t)SIM_CHUNK * 1000;
    uint64_t hbm = cfg->lend_chunk_ns ? us_bytes / cfg->lend_chunk_ns : 0;
    uint64_t chunk_ns = cfg->evict_service_ns + cfg->pcie_latency_ns + 2 * (us_bytes / cfg->pcie_mbyte_per_s[g]);
    uint64_t giveback = chunk_ns ? us_bytes / chunk_ns : 0;

    huvm_core_set_gpu_rates(&sim->core,
                            g,
                            (uint32_t)(hbm < HUVM_MAX_MBYTE_PER_S ? hbm : HUVM_MAX_MBYTE_PER_S),
                            (uint32_t)(giveback < HUVM_MAX_MBYTE_PER_S ? giveback : HUVM_MAX_MBYTE_PER_S));
}

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
        sim_set_error(err, HUVM_NV_ERR_INVALID_ARGUMENT, -1, "preset", "preset %u is not stock, atc22 or huvm", preset);
        return NULL;
    }
    sim = calloc(1, sizeof(*sim));
    if (!sim) {
        sim_set_error(err, HUVM_NV_ERR_NO_MEMORY, -1, "", "out of memory");
        return NULL;
    }
    sim->cfg = *cfg;
    huvm_core_init(&sim->core, HUVM_BACKEND_SIM, preset);
    {
        huvm_sim_thr_params_t tp;

        huvm_sim_thr_default_params(&tp); /* uvm_perf_thrashing.c's module-parameter defaults */
        huvm_sim_thr_init(&sim->thr, &tp);
    }
    /* The prototype's module runs its prefetch its own way, whatever its policy fields are set to later. */
    sim->proto_prefetch = preset == HUVM_PRESET_ATC22;
    sim->core.single_writer = 1;    /* one event loop updates the counters (readers may run beside it) */
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
        sim_set_gpu_rates(sim, a);
        g->capacity_chunks =
            (cfg->flags & HUVM_SIM_FLAG_UNLIMITED) ? SIM_UNLIMITED_CHUNKS : info.memory_bytes / SIM_CHUNK;
        list_init(&g->own);
        for (b = 0; b < HUVM_SIM_MAX_GPUS; b++)
            list_init(&g->guest[b]);
        res_set(&g->h2d, cfg->pcie_mbyte_per_s[a], cfg->pcie_latency_ns);
        res_set(&g->d2h, cfg->pcie_mbyte_per_s[a], cfg->pcie_latency_ns);
        if (cfg->flags & HUVM_SIM_FLAG_NVSWITCH) {
            res_set(&g->port_out, cfg->nvswitch_port_mbyte_per_s[a], cfg->nvlink_latency_ns);
            res_set(&g->port_in, cfg->nvswitch_port_mbyte_per_s[a], cfg->nvlink_latency_ns);
        }
    }
    for (a = 0; a < cfg->gpu_count; a++) {
        for (b = 0; b < cfg->gpu_count; b++) {
            huvm_link_t link;

            if (a == b || cfg->link_type[a][b] == HUVM_LINK_NONE)
                continue;
            sim->gpus[a].candidates |= 1u << b;
            res_set(&sim->nvl[a][b], cfg->link_mbyte_per_s[a][b], cfg->nvlink_latency_ns);
            memset(&link, 0, sizeof(link));
            link.link_type = cfg->link_type[a][b];
            link.link_count = cfg->link_count[a][b];
            link.mbyte_per_s = cfg->link_mbyte_per_s[a][b];
            st = huvm_core_set_link(&sim->core, a, b, &link);
            if (st != HUVM_NV_OK) {
                char f[48];

                snprintf(f, sizeof(f), "links[%u][%u]", a, b);
                sim_set_error(err, st, -1, f, "the policy core refused the link GPU %u->%u (status 0x%x)", a, b, st);
                free(sim);
                return NULL;
            }
        }
    }
    for (a = 0; a < cfg->gpu_count; a++) {
        uint32_t sw = cfg->pcie_switch[a];

        if (sw) {
            res_set(&sim->sw_h2d[a], cfg->pcie_switch_mbyte_per_s[sw - 1], 0);
            res_set(&sim->sw_d2h[a], cfg->pcie_switch_mbyte_per_s[sw - 1], 0);
        }
    }
    sim->host_limit_chunks = cfg->host_memory_bytes ? cfg->host_memory_bytes / SIM_CHUNK : UINT64_MAX;
    sim->sample_interval = cfg->sample_interval_ns;
    return sim;
}

void huvm_sim_destroy(huvm_sim_t *sim)
{
    uint32_t i;

    if (!sim)
        return;
    for (i = 0; i < sim->n_tenants; i++)
        sim_tenant_free(&sim->tenants[i]);
    sim_links_free(sim);
    free(sim->chunks);
    free(sim->pop);
    free(sim->fetched);
    huvm_sim_thr_destroy(&sim->thr);
    free(sim->samples);
    free(sim);
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
    case 0:  v->evict_to_peer++; break;
    case 1:  v->evict_to_host++; break;
    case 2:  v->fetch_from_peer++; break;
    case 3:  v->fetch_from_host++; break;
    default: v->prefetch++; break;
    }
}

int host_take_chunk(huvm_sim_t *sim)
{
    if (sim->host_chunks >= sim->host_limit_chunks) {
        run_error(sim,
                  HUVM_NV_ERR_NO_MEMORY,
                  "host_memory_bytes",
                  "host memory is exhausted (%llu GiB evicted)",
                  (unsigned long long)(sim->host_chunks / 512));
        return -1;
    }
    sim->host_chunks++;
    return 0;
}

/* Evict chunk ci (owner g's own, resident on g) where the core says. Returns when g can reuse the memory
 * (sync) or t (async: pre-eviction). run: a pre-eviction batch's (huvm_decide_evict_run, max chunks left in
 * it), or NULL: a decision per chunk. */
static SIM_ALWAYS_INLINE uint64_t evict_own(huvm_sim_t *sim,
                                            uint32_t g,
                                            uint32_t ci,
                                            uint64_t t,
                                            uint32_t flags,
                                            int sync,
                                            uint32_t *stale,
                                            huvm_evict_run_t *run,
                                            uint32_t max)
{
    sim_chunk_t *c = &sim->chunks[ci];
    sim_gpu_t *gg = &sim->gpus[g];
    huvm_evict_request_t req;
    huvm_decision_t d;
    uint64_t start = u64_max(t, c->ready_ns), fin;

    sim->decide_ns = t;
    /* A chunk of a pre-eviction run: its decision reads no state (huvm_decide_evict_run), so the refresh of
     * what the run's moves changed waits for the run's next decision (stale accumulates); g's copies that
     * ended by sim->now are still retired at once, as the per-chunk refresh would. */
    if (run && run->left) {
        sim_gpu_retire(sim, g, sim->now);
        /* Its own use is noted at the run's next decision, or at the batch's end (sim_preevict): at one now,
         * a run only lowers it, and after the run's first note the peak history of a falling use depends only
         * on its last value (huvm_peak_update: the high mark, the falling flag and the low mark; no spike
         * begins below the first note). noted_ns 0: a note is due. */
        gg->noted_ns = 0;
    }
    else {
        refresh_gpus(sim, stale ? *stale : ~0u);
        if (stale)
            *stale = 0;
    }
    memset(&req, 0, sizeof(req));
    req.gpu = g;
    req.flags = flags;
    req.candidates = gg->candidates;
    req.now_ns = t;
    req.chunk_fetched_ns = sim->fetched[ci];
    d = huvm_decide_evict_run(&sim->core, sim->state, &req, run, max);
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
    if (stale)
        *stale |= 1u << g | (d.dst < sim->cfg.gpu_count ? 1u << d.dst : 0); /* what this eviction changes */
    if (d.dst == HUVM_DEST_HOST && host_take_chunk(sim))
        return t;
    if (c->flags & SIM_CF_PREFETCHED)
        pf_note(sim, c, 0);
    list_remove(sim->chunks, &gg->own, ci);
    if (d.dst != HUVM_DEST_HOST) {
        uint32_t p = d.dst;

        /* the glue's peer eviction moves the block's resident pages (uvm_huvm_move_with_chunk: make_resident
         * of pages_to_evict into the peer's 2 MiB chunk): the peer holds the same groups */
        fin = sim_xfer_peer(sim,
                            g,
                            p,
                            start,
                            pages_bytes(c->pages),
                            sim->cfg.migrate_service_ns,
                            sync ? SIM_FG : SIM_BG,
                            ci);
        lend_charge(sim, p, 1);
        list_push_tail(sim->chunks, &sim->gpus[p].guest[g], ci);
        sim->gpus[p].guest_chunks++;
        gg->peer_chunks++;
        c->holder = (uint8_t)p;
        vacnt_add(sim, ci, 0);
        huvm_evict_run_moved(run, p);
    }
    else {
        /* only the resident pages are written back (the rest of the block is in host memory already) */
        fin = sim_xfer_d2h(sim, g, start, pages_bytes(c->pages), sim->cfg.evict_service_ns, sync ? SIM_FG : SIM_BG, ci);
        c->loc = HUVM_SIM_LOC_HOST;
        c->pages = 0;
        gg->host_chunks++;
        vacnt_add(sim, ci, 1);
    }
    c->ready_ns = u64_max(c->ready_ns, fin);
    c->flags &= (uint8_t)~SIM_CF_REMOTE;
    gg->last_evict_ns = t ? t : 1;
    huvm_account_evict(&sim->core, g, d.dst, d.reason, flags & HUVM_EVICT_FLAG_PREEVICT, SIM_CHUNK, chunk_va(sim, ci));
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

    if (host_take_chunk(sim))
        return t;
    if (c->flags & SIM_CF_PREFETCHED)
        pf_note(sim, c, 0);
    list_remove(sim->chunks, &hg->guest[o], ci);
    hg->guest_chunks--;
    sim->gpus[o].peer_chunks--;
    sim->gpus[o].host_chunks++;
    fin = sim_xfer_d2h(sim,
                       h,
                       u64_max(t, c->ready_ns),
                       pages_bytes(c->pages),
                       sim->cfg.evict_service_ns,
                       sync ? SIM_FG : SIM_BG,
                       ci);
    lend_charge(sim, h, 1);
    c->loc = HUVM_SIM_LOC_HOST;
    c->pages = 0;
    c->ready_ns = u64_max(c->ready_ns, fin);
    c->flags &= (uint8_t)~SIM_CF_REMOTE;
    huvm_account_giveback(&sim->core, h, o, SIM_CHUNK, chunk_va(sim, ci));
    return sync ? fin : t;
}

/* Make n chunks free on GPU g at time t: harvested chunks go first (give-back, to host), then g's own
 * chunks in LRU order (huvm_decide_evict). Returns the time the memory is usable, or t with sim->failed
 * set when nothing can be evicted. */
static SIM_ALWAYS_INLINE uint64_t make_room(huvm_sim_t *sim, uint32_t g, uint64_t n, uint64_t t, uint32_t flags)
{
    sim_gpu_t *gg = &sim->gpus[g];
    uint64_t free_now;

    sim_gpu_retire(sim, g, t);
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
            uint64_t next = sim_gpu_inflight_next(sim, g);
            uint64_t sync = t + 2 * res_ns(&gg->d2h, SIM_CHUNK) + gg->d2h.latency_ns;

            if (next <= sync) {
                t = u64_max(t, next);
                sim_gpu_retire(sim, g, t);
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
            t = evict_own(sim, g, gg->own.head, t, flags, 1, NULL, NULL, 1);
            continue;
        }
        run_error(sim,
                  HUVM_NV_ERR_NO_MEMORY,
                  "tenants",
                  "GPU %u is out of memory: %llu MiB are pinned by "
                  "cudaMalloc and nothing is evictable",
                  g,
                  (unsigned long long)(gg->pinned_chunks * 2));
        break;
    }
    return t;
}

void sim_preevict(huvm_sim_t *sim, uint32_t g, uint64_t t, int giveback_only)
{
    sim_gpu_t *gg = &sim->gpus[g];
    huvm_giveback_plan_t plan, back;
    huvm_evict_run_t run = { 0, 0 };
    uint64_t need;
    uint32_t n, o, k, stale;

    if (sim->cfg.flags & HUVM_SIM_FLAG_UNLIMITED)
        return;
    sim->decide_ns = t;
    refresh_state(sim);
    memset(&plan, 0, sizeof(plan));
    memset(&back, 0, sizeof(back));
    /* The kernel's worker (uvm_huvm_preevict.c): a lender below its lend reserve gives its guests' chunks
     * back in the background (huvm_giveback_need's plan), whatever pre-eviction decides. */
    need = huvm_giveback_need(&sim->core, sim->state, g);
    if (need)
        huvm_decide_giveback(&sim->core, sim->state, g, need, &back);
    if (!giveback_only)
        huvm_decide_preevict_plan(&sim->core, sim->state, g, t, &plan);
    for (o = 0; o < sim->cfg.gpu_count; o++)
        plan.guest_chunks[o] =
            plan.guest_chunks[o] > back.guest_chunks[o] ? plan.guest_chunks[o] : back.guest_chunks[o];
    /* Guests' chunks first (a lender's own data never leaves ahead of a guest's), then its own. The state was
     * refreshed above: the first eviction sees afresh only what the give-backs changed (all GPUs after any),
     * each next one only those the one before changed (refresh_gpus: same t, same sim->now, nothing else ran in
     * between). */
    stale = 0;
    for (o = 0; o < sim->cfg.gpu_count && !sim->failed; o++) {
        for (k = 0; k < plan.guest_chunks[o] && gg->guest[o].count && !sim->failed; k++) {
            giveback_one(sim, g, o, t, 0);
            gg->preevicted++;
            stale = ~0u;
        }
    }
    for (n = 0; n < plan.own_chunks && gg->own.count && !sim->failed; n++) {
        evict_own(sim,
                  g,
                  gg->own.head,
                  t,
                  HUVM_EVICT_FLAG_PREEVICT,
                  0,
                  &stale,
                  sim->per_chunk_evict ? NULL : &run,
                  plan.own_chunks - n);
        gg->preevicted++;
    }
    if (gg->noted_ns == 0 && !sim->failed)
        /* the last chunk was a run's (evict_own): note the own use its refresh would have, before its move */
        note_own_at(gg, &sim->state[g], sim->now, (gg->own.count + gg->pinned_chunks + 1) * SIM_CHUNK);
    gg->preevicted = u64_min(gg->preevicted, gpu_free(gg) + gg->inflight);
}

/* Prefetch owner g's host-resident chunk pci into GPU dst's memory (g's own or a peer's; a background copy from
 * t): the copy, the chunk's new place and the accounting; the caller puts it on dst's list. As the glue's prefetch
 * (uvm_huvm_prefetch.c), it moves the block's host-resident pages: the populated groups. */
static SIM_ALWAYS_INLINE void prefetch_from_host(huvm_sim_t *sim, uint32_t g, uint32_t dst, uint32_t pci, uint64_t t)
{
    sim_chunk_t *c = &sim->chunks[pci];

    sim->host_chunks--;
    sim->gpus[g].host_chunks--;
    c->ready_ns = sim_xfer_h2d(sim,
                               dst,
                               u64_max(t, c->ready_ns),
                               pages_bytes(sim->pop[pci]),
                               sim->cfg.migrate_service_ns,
                               SIM_BG,
                               pci);
    c->loc = HUVM_SIM_LOC_GPU;
    c->holder = (uint8_t)dst;
    c->pages = sim->pop[pci];
    c->flags |= SIM_CF_PREFETCHED;
    huvm_sim_thr_migrated(&sim->thr, pci, (uint8_t)dst, t); /* a prefetch: a thrashing event towards dst */
    vacnt_add(sim, pci, 4);
    huvm_account_prefetch(&sim->core, g, dst, SIM_CHUNK, chunk_va(sim, pci));
}

/* Prefetch owner g's host-resident chunk pci into peer p's memory as a guest: returns when it lands. */
static uint64_t prefetch_to_peer(huvm_sim_t *sim, uint32_t g, uint32_t p, uint32_t pci, uint64_t t)
{
    sim_gpu_t *pg = &sim->gpus[p];

    prefetch_from_host(sim, g, p, pci, t);
    sim->gpus[g].peer_chunks++;
    lend_charge(sim, p, 1);
    list_push_tail(sim->chunks, &pg->guest[g], pci);
    pg->guest_chunks++;
    return sim->chunks[pci].ready_ns;
}

/* After a fault brought chunk ci of tenant tt from host: ask the core for a prefetch plan and start it. */

static SIM_ALWAYS_INLINE void prefetch(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t ci, uint64_t t)
{
    uint32_t g = tt->spec.gpu;
    huvm_prefetch_plan_t plan;
    uint32_t stride, k, span, local_done = 0, peer_done = 0, local_cnt, back_done = 0;
    uint32_t idx = ci - tt->chunk_base;

    sim->decide_ns = t;
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
            c->ready_ns = sim_xfer_peer(sim,
                                        p,
                                        g,
                                        u64_max(t, c->ready_ns),
                                        pages_bytes(c->pages),
                                        sim->cfg.migrate_service_ns,
                                        SIM_BG,
                                        pci);
            lend_charge(sim, p, 1);
            c->holder = (uint8_t)g;
            sim->fetched[pci] = c->ready_ns;
            c->flags |= SIM_CF_PREFETCHED;
            huvm_sim_thr_migrated(&sim->thr, pci, (uint8_t)g, t);
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
            prefetch_from_host(sim, g, g, pci, t);
            list_push_tail(sim->chunks, &gg->own, pci);
            gg->batch_allocs++;             /* the prefetched chunk takes memory of this batch too */
            local_done++;
        }
        else if (peer_done < plan.peer_chunks) {
            uint32_t p = plan.peer;
            sim_gpu_t *pg = &sim->gpus[p];

            refresh_state(sim);
            if (gpu_free(pg) == 0 || huvm_admit_lend(&sim->core, sim->state, g, p, SIM_CHUNK, t) != HUVM_REASON_PEER) {
                peer_done = plan.peer_chunks;   /* the peer is full: the rest of the host part is dropped */
                continue;
            }
            prefetch_to_peer(sim, g, p, pci, t);
            peer_done++;
        }
        else if (back_done >= plan.peer_local_chunks) {
            break;
        }
    }
}

/* ---- The prototype's prefetch (huvm-atc22) ----
 *
 * As casys-kaist/HUVM's uvm_gpu_replayable_faults.c runs it (schedule_parallel_fetch_for_batch,
 * service_prefetch_for_fault_batch, classify_and_schedule_parallel_prefetch, service_prefetch_va_block): each
 * fault batch queues one item on the GPU's fetch kthread, before the batch is serviced, with the batch's
 * direction (forward when its lowest fault lies above the previous batch's reference address) and base (its
 * highest fault forward, its lowest backward). The item walks the window base + dir * k * stride; the blocks
 * a peer holds go to a second kthread (the parallel prefetch queue), the host-resident ones it moves itself.
 * Each block is moved and waited for (uvm_tracker_wait) before the next: a block brought to the faulting GPU
 * goes through uvm_va_block_service_locked, the fault path's per-block service (fault_service_ns from host,
 * peer_fault_service_ns from a peer), then its copy; a block duplicated on a peer goes through
 * uvm_va_block_make_resident (migrate_service_ns, as a prefetch). A new batch kills the item still pending
 * in a queue (never the running one). How many blocks go where is the core's plan (huvm_decide_prefetch),
 * taken when the item runs. */

static void proto_run(huvm_sim_t *sim, uint32_t g, uint32_t q, uint32_t ti, uint64_t base, int32_t dir, uint64_t s);

/* Queue an item on GPU g's kthread q at time t: an item pending there is killed; the new one runs at t, or
 * is pending until the running one ends. */
static void proto_submit(huvm_sim_t *sim, uint32_t g, uint32_t q, uint32_t ti, uint64_t base, int32_t dir, uint64_t t)
{
    sim_gpu_t *gg = &sim->gpus[g];
    sim_pfq_t *pq = &gg->pfq[q];

    if (pq->pend && pq->start_ns <= t) {
        pq->pend = 0;
        proto_run(sim, g, q, pq->tenant, pq->base, pq->dir, pq->start_ns);
    }
    /* a pending item is killed: the new one takes its place */
    if (pq->busy_ns <= t) {
        pq->pend = 0;
        proto_run(sim, g, q, ti, base, dir, t);
        return;
    }
    pq->pend = 1;
    pq->start_ns = pq->busy_ns;
    pq->tenant = ti;
    pq->base = base;
    pq->dir = dir;
}

void sim_proto_flush(huvm_sim_t *sim, uint32_t g, uint64_t t)
{
    uint32_t q;

    for (q = 0; q < 2; q++) {
        sim_pfq_t *pq = &sim->gpus[g].pfq[q];

        if (pq->pend && pq->start_ns <= t) {
            pq->pend = 0;
            proto_run(sim, g, q, pq->tenant, pq->base, pq->dir, pq->start_ns);
        }
    }
}

/* The window's k-th chunk (k >= 1) of tenant tt from base, or SIM_NIL past either end of its chunks. */
static uint32_t proto_window(const sim_tenant_t *tt, uint64_t base, int32_t dir, uint32_t stride, uint32_t k)
{
    uint64_t idx = base - tt->chunk_base, step = (uint64_t)k * stride;

    if (dir < 0)
        return step <= idx ? tt->chunk_base + (uint32_t)(idx - step) : SIM_NIL;
    return idx + step < tt->spec.n_chunks ? tt->chunk_base + (uint32_t)(idx + step) : SIM_NIL;
}

/* A block another GPU holds whole for g (not remote-mapped): the parallel queue's in two-stage mode. */
static int proto_peer_held(const sim_chunk_t *c, uint32_t g)
{
    return (c->flags & SIM_CF_LIVE) && c->loc == HUVM_SIM_LOC_GPU && c->holder != g && !(c->flags & SIM_CF_REMOTE);
}

static void proto_run(huvm_sim_t *sim, uint32_t g, uint32_t q, uint32_t ti, uint64_t base, int32_t dir, uint64_t s)
{
    sim_tenant_t *tt = &sim->tenants[ti];
    sim_gpu_t *gg = &sim->gpus[g];
    huvm_prefetch_plan_t plan;
    uint32_t stride, k, span, local_done = 0, peer_done = 0, back_done = 0, two_stage;
    uint64_t clock = s;

    sim->decide_ns = s;
    refresh_state(sim);
    memset(&plan, 0, sizeof(plan));
    plan.peer = HUVM_DEST_HOST;
    huvm_decide_prefetch(&sim->core, sim->state, g, gg->candidates, s, &plan);
    if (plan.peer >= sim->cfg.gpu_count || plan.peer == g || !(gg->candidates & (1u << plan.peer)))
        plan.peer_chunks = 0;
    stride = plan.stride ? plan.stride : 1;
    span = plan.local_chunks + plan.peer_chunks;
    if (plan.peer_local_chunks > span)
        span = plan.peer_local_chunks;
    if (!span)
        return;
    two_stage = sim->core.policy.prefetch_mode == HUVM_PREFETCH_TWO_STAGE;
    if (q == SIM_PFQ_FETCH && two_stage && plan.peer_local_chunks) {
        /* classify_and_schedule_parallel_prefetch: the peer-held blocks go to the parallel queue first */
        for (k = 1; k <= span; k++) {
            uint32_t pci = proto_window(tt, base, dir, stride, k);

            if (pci == SIM_NIL)
                break;
            if (proto_peer_held(&sim->chunks[pci], g)) {
                proto_submit(sim, g, SIM_PFQ_BACK, ti, base, dir, s);
                break;
            }
        }
    }
    for (k = 1; k <= span && !sim->failed; k++) {
        uint32_t pci = proto_window(tt, base, dir, stride, k);
        sim_chunk_t *c;

        if (pci == SIM_NIL)
            break;
        c = &sim->chunks[pci];
        if (!(c->flags & SIM_CF_LIVE) || (c->loc == HUVM_SIM_LOC_GPU && c->holder == g))
            continue;
        if (proto_peer_held(c, g)) {
            uint32_t p = c->holder;

            if (q == SIM_PFQ_FETCH && two_stage)
                continue;       /* the parallel queue's */
            if (back_done >= plan.peer_local_chunks)
                continue;
            if (gpu_free(gg) == 0) {
                /* the block service allocates with eviction (block_alloc_gpu_chunk), on this kthread's time */
                clock = make_room(sim, g, 1, clock, 0);
                if (sim->failed)
                    break;
            }
            list_remove(sim->chunks, &sim->gpus[p].guest[g], pci);
            sim->gpus[p].guest_chunks--;
            gg->peer_chunks--;
            clock = u64_max(clock, c->ready_ns) + sim->cfg.peer_fault_service_ns;
            huvm_sim_thr_migrated(&sim->thr, pci, (uint8_t)g, clock); /* the kthread's service: an event */
            clock = sim_xfer_peer(sim, p, g, clock, pages_bytes(c->pages), 0, SIM_BG, pci);
            c->ready_ns = clock;
            lend_charge(sim, p, 1);
            c->holder = (uint8_t)g;
            sim->fetched[pci] = clock;
            c->flags |= SIM_CF_PREFETCHED;
            list_push_tail(sim->chunks, &gg->own, pci);
            gg->batch_allocs++;
            back_done++;
            vacnt_add(sim, pci, 2);
            huvm_account_fetch(&sim->core, g, p, 0, SIM_CHUNK, chunk_va(sim, pci));
            continue;
        }
        if (c->loc != HUVM_SIM_LOC_HOST || q != SIM_PFQ_FETCH)
            continue;
        if (peer_done < plan.peer_chunks) {
            uint32_t p = plan.peer;
            sim_gpu_t *pg = &sim->gpus[p];

            sim->decide_ns = clock;
            refresh_state(sim);
            if (gpu_free(pg) == 0 ||
                huvm_admit_lend(&sim->core, sim->state, g, p, SIM_CHUNK, clock) != HUVM_REASON_PEER) {
                peer_done = plan.peer_chunks; /* the peer is full: the rest of the host part is dropped */
                continue;
            }
            clock = prefetch_to_peer(sim, g, p, pci, clock);
            peer_done++;
        }
        else if (local_done < plan.local_chunks) {
            if (gpu_free(gg) == 0) {
                clock = make_room(sim, g, 1, clock, 0); /* as above: the block service evicts */
                if (sim->failed)
                    break;
            }
            sim->host_chunks--;
            gg->host_chunks--;
            clock = u64_max(clock, c->ready_ns) + sim->cfg.fault_service_ns;
            huvm_sim_thr_migrated(&sim->thr, pci, (uint8_t)g, clock);
            clock = sim_xfer_h2d(sim, g, clock, pages_bytes(sim->pop[pci]), 0, SIM_BG, pci);
            sim->pop[pci] = HUVM_SIM_PAGES_ALL;
            c->ready_ns = clock;
            c->loc = HUVM_SIM_LOC_GPU;
            c->holder = (uint8_t)g;
            c->pages = HUVM_SIM_PAGES_ALL;
            list_push_tail(sim->chunks, &gg->own, pci);
            c->flags |= SIM_CF_PREFETCHED;
            gg->batch_allocs++;
            local_done++;
            vacnt_add(sim, pci, 4);
            huvm_account_prefetch(&sim->core, g, g, SIM_CHUNK, chunk_va(sim, pci));
        }
    }
    gg->pfq[q].busy_ns = u64_max(gg->pfq[q].busy_ns, clock);
}

void sim_proto_batch(huvm_sim_t *sim, sim_tenant_t *tt)
{
    uint32_t g = tt->spec.gpu;
    sim_gpu_t *gg = &sim->gpus[g];
    int32_t dir;
    uint64_t base;

    if (tt->batch_lo == SIM_NIL || !huvm_prefetch_active(&sim->core, g))
        return;
    /* calc_fault_direction: forward when the batch lies above the previous one's reference (pf_prev - 1; the
     * first batch looks forward, as after the prototype's reference address 0) */
    if (gg->pf_prev <= tt->batch_lo) {
        dir = 1;
        base = tt->batch_hi;
    }
    else {
        dir = -1;
        base = tt->batch_lo;
    }
    gg->pf_prev = base + 1;
    proto_submit(sim, g, SIM_PFQ_FETCH, (uint32_t)(tt - sim->tenants), base, dir, tt->batch_start);
}

/* UVM's density prefetcher (uvm_perf_prefetch.c: compute_prefetch_mask, compute_prefetch_region) at 64 KiB
 * leaves: a bitmap tree over the block counts the groups resident on the GPU or faulting; for each faulted
 * leaf, walking from the leaf to the root, the last (largest) subtree more than `threshold` % of which is
 * counted is prefetched. Returns the faulted groups and the prefetched ones (resident ones too). */
uint32_t huvm_sim_prefetch_region(uint32_t resident, uint32_t faulted, uint32_t threshold)
{
    const uint32_t occ = resident | faulted;
    uint32_t region = faulted, f = faulted;

    while (f) {
        uint32_t leaf = (uint32_t)__builtin_ctz(f), size, best = 0;

        f &= f - 1;
        for (size = 1; size <= HUVM_SIM_PAGE_GROUPS; size <<= 1) {
            uint32_t m = size == HUVM_SIM_PAGE_GROUPS ? HUVM_SIM_PAGES_ALL : ((1u << size) - 1) << (leaf & ~(size - 1));

            if ((uint32_t)__builtin_popcount(occ & m) * 100 > size * threshold)
                best = m;
        }
        region |= best;
    }
    return region;
}

/* Service one faulted chunk of tenant tt at time t for the groups want; returns the time the tenant can go on.
 * *remote is set when the core chose to map the peer's copy instead (the touch then runs over NVLink). A fault
 * moves only the groups the density prefetcher's region (huvm_sim_prefetch_region) adds to what its GPU holds; the
 * block's GPU memory is one 2 MiB chunk however many groups it holds. */
/* A GPU fault's thrashing hint: while it is THROTTLE, the fault waits for the nap's end and asks again (the
 * replay). Returns when the fault may be serviced. */
static uint64_t thrash_throttle(huvm_sim_t *sim, uint32_t ci, uint32_t g, uint64_t t)
{
    huvm_sim_thr_hint_t h;
    int replays = 0;

    if (sim->thr.gate[ci].slot == HUVM_SIM_THR_UNTRACKED)
        return t; /* not tracked: no hint (every block of a one-processor VA space) */
    h = huvm_sim_thr_hint(&sim->thr, ci, (uint8_t)g, t);

    while (h.type == HUVM_SIM_THR_HINT_THROTTLE && replays++ < 64) {
        t = u64_max(t + 1, h.end_ns);
        h = huvm_sim_thr_hint(&sim->thr, ci, (uint8_t)g, t);
    }
    return t;
}

uint64_t sim_service_fault(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t ci, uint32_t want, uint64_t t, int *remote)
{
    sim_chunk_t *c = &sim->chunks[ci];
    uint32_t g = tt->spec.gpu;
    sim_gpu_t *gg = &sim->gpus[g];
    const int peer = c->loc == HUVM_SIM_LOC_GPU && c->holder != g;
    const uint32_t held = c->loc == HUVM_SIM_LOC_GPU ? c->pages : 0;
    /* the groups this fault brings: the density prefetcher's region less what a GPU already holds; those with
     * data (sim->pop) are copied from host memory, the others zero-filled (populated) */
    const uint32_t add =
        (want == HUVM_SIM_PAGES_ALL ? want : huvm_sim_prefetch_region(held, want, sim->cfg.prefetch_threshold)) & ~held;
    const uint32_t from_host = add ? add & sim->pop[ci] : 0; /* no load when nothing is added */

    *remote = 0;
    /* UVM's thrashing detection (huvm_sim_thrash.h) asked first, as service_fault_batch asks
     * uvm_perf_thrashing_get_hint per fault: a THROTTLE hint leaves the fault unserviced until the nap ends (it
     * is replayed then and asks again). Events are the fault-driven copies to this GPU below; evictions are
     * none. A tenant's VA space has one processor, its GPU, so no block starts tracking in any scenario so far
     * and these hints stay NONE; a PIN could only come from a second processor (a CPU touch, a GPU sharing
     * the VA space) that the traces do not have yet. */
    t = thrash_throttle(sim, ci, g, t);
    /* A migrating fault's block service: one block at a time per GPU (upstream's service_fault_batch loop),
     * whichever of the GPU's tenants faulted; its copy follows (no service of its own: the fault service
     * covers it). A fault with nothing to copy (first touch) only populates: populate_ns below. */
    if (peer || from_host) {
        t = u64_max(t, gg->fault_free_ns) + (peer ? sim->cfg.peer_fault_service_ns : sim->cfg.fault_service_ns);
        gg->fault_free_ns = t;
    }
    sim->pop[ci] |= add;
    if (c->loc == HUVM_SIM_LOC_GPU && !peer) {
        /* Partly resident here: the missing groups of the service region. */
        uint64_t fin = from_host ? sim_xfer_h2d(sim, g, u64_max(t, c->ready_ns), pages_bytes(from_host), 0, SIM_FG, ci)
                                 : u64_max(t, c->ready_ns) + sim->cfg.populate_ns;

        c->pages |= add;
        c->ready_ns = fin;
        if (from_host)
            huvm_sim_thr_migrated(&sim->thr, ci, (uint8_t)g, t); /* a fault-driven copy: a thrashing event */
        if (from_host)
            huvm_account_fetch(&sim->core,
                               g,
                               HUVM_DEST_HOST,
                               HUVM_FETCHED_PAGES,
                               pages_bytes(from_host),
                               chunk_va(sim, ci));
        return fin;
    }
    if (c->flags & SIM_CF_PREFETCHED)
        pf_note(sim, c, 1); /* prefetched to a peer, and wanted: the prefetch paid */
    if (peer) {
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
        /* the glue's fetch-back moves the pages the peer holds (uvm_huvm_fetch.c: make_resident of the peer's
         * resident mask); groups of the service region the peer does not hold come from host memory */
        fin = sim_xfer_peer(sim, p, g, u64_max(t, c->ready_ns), pages_bytes(c->pages), 0, SIM_FG, ci);
        if (from_host)
            fin = u64_max(fin, sim_xfer_h2d(sim, g, u64_max(t, c->ready_ns), pages_bytes(from_host), 0, SIM_FG, ci));
        c->pages |= add;
        lend_charge(sim, p, 1);
        list_remove(sim->chunks, &sim->gpus[p].guest[g], ci);
        sim->gpus[p].guest_chunks--;
        gg->peer_chunks--;
        list_push_tail(sim->chunks, &gg->own, ci);
        c->holder = (uint8_t)g;
        c->ready_ns = fin;
        sim->fetched[ci] = fin;
        huvm_sim_thr_migrated(&sim->thr, ci, (uint8_t)g, t);
        vacnt_add(sim, ci, 2);
        huvm_account_fetch(&sim->core, g, p, 0, SIM_CHUNK, chunk_va(sim, ci));
        if (!sim->proto_prefetch && (sim->core.policy.prefetch_mode == HUVM_PREFETCH_TWO_STAGE ||
                                     sim->core.policy.prefetch_mode == HUVM_PREFETCH_LOCAL))
            prefetch(sim, tt, ci, t); /* the window's peer-held chunks come back too */
        return fin;
    }
    gg->batch_allocs++;
    t = make_room(sim, g, 1, t, 0);
    if (sim->failed)
        return t;
    if (c->loc == HUVM_SIM_LOC_HOST) {
        uint64_t fin = from_host ? sim_xfer_h2d(sim, g, u64_max(t, c->ready_ns), pages_bytes(from_host), 0, SIM_FG, ci)
                                 : u64_max(t, c->ready_ns) + sim->cfg.populate_ns;

        sim->host_chunks--;
        gg->host_chunks--;
        c->loc = HUVM_SIM_LOC_GPU;
        c->holder = (uint8_t)g;
        c->pages = add;
        c->ready_ns = fin;
        list_push_tail(sim->chunks, &gg->own, ci);
        if (from_host)
            huvm_sim_thr_migrated(&sim->thr, ci, (uint8_t)g, t);
        vacnt_add(sim, ci, 3);
        huvm_account_fetch(&sim->core, g, HUVM_DEST_HOST, 0, SIM_CHUNK, chunk_va(sim, ci));
        if (!sim->proto_prefetch)
            prefetch(sim, tt, ci, t); /* huvm-atc22 prefetches per fault batch (sim_proto_batch) */
        return fin;
    }
    /* First touch: populate zeroed pages (the service region of a never-touched block). */
    t += sim->cfg.populate_ns;
    c->loc = HUVM_SIM_LOC_GPU;
    c->holder = (uint8_t)g;
    c->pages = add;
    c->ready_ns = t;
    list_push_tail(sim->chunks, &gg->own, ci);
    tt->res.first_touches++;
    return t;
}

/* Allocate a cudaMalloc (pinned) chunk: room is made in PMA context (never to peers). */
uint64_t sim_pin_chunk(huvm_sim_t *sim, uint32_t g, uint32_t ci, uint64_t t)
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
        c->pages = HUVM_SIM_PAGES_ALL;
        sim->pop[ci] = HUVM_SIM_PAGES_ALL;
        c->flags |= SIM_CF_PINNED;
        c->ready_ns = t;
    }
    return t;
}

void sim_release_chunk(huvm_sim_t *sim, uint32_t ci)
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
        }
        else if (c->holder == o) {
            list_remove(sim->chunks, &sim->gpus[o].own, ci);
        }
        else {
            /* Harvested data freed by its owner: the peer's chunk is simply released (no copy); the core's
             * held/lent/harvested gauges go down with it. */
            list_remove(sim->chunks, &sim->gpus[c->holder].guest[o], ci);
            sim->gpus[c->holder].guest_chunks--;
            sim->gpus[o].peer_chunks--;
            huvm_account_release(&sim->core, o, c->holder, SIM_CHUNK, chunk_va(sim, ci));
        }
    }
    else if (c->loc == HUVM_SIM_LOC_HOST) {
        sim->host_chunks--;
        sim->gpus[o].host_chunks--;
    }
    c->loc = HUVM_SIM_LOC_NONE;
    c->pages = 0;
    sim->pop[ci] = 0;
    c->flags = 0;
    c->ready_ns = 0;
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
    note_traffic_budgets(sim);
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
        uint64_t bc = UINT64_MAX, next = UINT64_MAX;

        /* the tenant furthest behind runs next (an op in progress: the time it has reached); the next one's
         * clock is where that op yields (sim_run_op) */
        for (i = 0; i < sim->n_tenants; i++) {
            sim_tenant_t *tt = &sim->tenants[i];
            uint64_t c = tenant_clock(tt);

            if (tt->state == SIM_T_DONE)
                continue;
            if (tt->state == SIM_T_RUNNING && !sim->fg_remaining && !tt->in_op)
                continue; /* background tenants stop with the last foreground one (an op in progress ends) */
            if (c < bc) {
                next = bc;
                bc = c;
                best = tt;
            }
            else if (c < next) {
                next = c;
            }
        }
        if (!best || bc >= until_ns)
            break;
        sim_sample_until(sim, bc);
        if (bc > sim->now)
            sim->now = bc;
        sim->yield_ns = next;
        if (best->state == SIM_T_PENDING)
            sim_tenant_start(sim, best);
        else
            sim_run_op(sim, best);
        if (sim->failed)
            goto failed;
    }
    for (i = 0; i < sim->n_tenants; i++) {
        sim_tenant_t *tt = &sim->tenants[i];
        uint64_t c = tenant_clock(tt);

        if (tt->state != SIM_T_PENDING && c > sim->now)
            sim->now = c;
    }
    if (!sim->fg_remaining)
        sim_sample_until(sim, sim->now);
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
