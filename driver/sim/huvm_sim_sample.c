/*
 * huvm: simulated node, samples of memory use over time and the results API (tenant results, step ends,
 * traffic, samples, chunk placement, the consistency check). SPDX-License-Identifier: MIT
 */
#include <stdlib.h>
#include <string.h>

#include "huvm_sim_internal.h"

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
        }
        else {
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

void sim_sample_until(huvm_sim_t *sim, uint64_t t)
{
    if (!sim->sample_interval)
        return;
    while (sim->next_sample <= t) {
        take_sample(sim, sim->next_sample);
        sim->next_sample = (sim->next_sample / sim->sample_interval + 1) * sim->sample_interval;
    }
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

uint32_t huvm_sim_tenant_ops(const huvm_sim_t *sim, uint32_t tenant, uint64_t *out, uint32_t n)
{
    const sim_tenant_t *tt;
    uint32_t k;

    if (!sim || tenant >= sim->n_tenants || (!out && n))
        return 0;
    tt = &sim->tenants[tenant];
    k = tt->op_end_n < n ? tt->op_end_n : n;
    if (k)
        memcpy(out, tt->op_end, (size_t)k * sizeof(uint64_t));
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
        }
        else {
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

/* Background copies queued on r whose release is not `release` (all of a link direction's copies free the same
 * GPU's memory, or none do: the copy path relies on it) or that end before the copy ahead of them (the queue is
 * in order of ends); *frees += those that free memory. */
static uint32_t queue_mixed(const sim_res_t *r, uint32_t release, uint64_t *frees)
{
    uint32_t i, bad = 0;

    for (i = 0; i < r->qlen; i++) {
        const sim_tok_t *k = &r->q[(r->qhead + i) & (r->qcap - 1)];

        bad += k->release != release;
        /* in order of their ends (sim_res_delay bisects for the first still running) */
        bad += i > 0 && k->fin < r->q[(r->qhead + i - 1) & (r->qcap - 1)].fin;
        *frees += k->release != 0;
    }
    return bad;
}

/* The copies in flight: each queue holds one kind, in order of their ends (sim_xfer_*: a GPU's d2h, port_out and nvl[g][*] free g's
 * memory, h2d, port_in and the PCIe switches' uplinks nothing), and a GPU's inflight count is the copies queued
 * out of it (sim_gpu_retire pops them by that count). Returns the GPUs that disagree. */
static uint32_t check_links(const huvm_sim_t *sim, huvm_sim_error_t *err)
{
    uint32_t bad = 0, g, b;

    for (g = 0; g < sim->cfg.gpu_count; g++) {
        const sim_gpu_t *gg = &sim->gpus[g];
        uint64_t out = 0, none = 0;
        uint32_t mixed;

        mixed = queue_mixed(&gg->d2h, g + 1, &out) + queue_mixed(&gg->port_out, g + 1, &out);
        for (b = 0; b < sim->cfg.gpu_count; b++)
            mixed += queue_mixed(&sim->nvl[g][b], g + 1, &out);
        mixed += queue_mixed(&gg->h2d, 0, &none) + queue_mixed(&gg->port_in, 0, &none) +
                 queue_mixed(&sim->sw_h2d[g], 0, &none) + queue_mixed(&sim->sw_d2h[g], 0, &none);
        if (mixed || out != gg->inflight) {
            bad++;
            sim_set_error(
                err,
                HUVM_NV_ERR_INVALID_STATE,
                (int32_t)g,
                "links",
                "GPU %u: %u queued copies of the wrong kind or out of order, %llu out of it for %llu in flight",
                g,
                mixed,
                (unsigned long long)out,
                (unsigned long long)gg->inflight);
        }
    }
    return bad;
}

uint32_t huvm_sim_check(const huvm_sim_t *sim, huvm_sim_error_t *err)
{
    uint64_t own[HUVM_SIM_MAX_GPUS] = { 0 }, guest[HUVM_SIM_MAX_GPUS] = { 0 }, peer[HUVM_SIM_MAX_GPUS] = { 0 };
    uint64_t host[HUVM_SIM_MAX_GPUS] = { 0 }, pinned[HUVM_SIM_MAX_GPUS] = { 0 }, host_total = 0;
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
        }
        else if (ch->loc == HUVM_SIM_LOC_HOST) {
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
            sim_set_error(err,
                          HUVM_NV_ERR_INVALID_STATE,
                          (int32_t)g,
                          "gpus",
                          "GPU %u: chunk counts disagree with the chunk states (own %u)",
                          g,
                          (uint32_t)gg->own.count);
        }
    }
    bad += check_links(sim, err);
    if (host_total != sim->host_chunks) {
        bad++;
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_STATE,
                      -1,
                      "host",
                      "host chunk count disagrees (%u)",
                      (uint32_t)host_total);
    }
    return bad;
}
