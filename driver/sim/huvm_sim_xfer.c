/*
 * huvm: simulated node, the transfer model: links (PCIe per GPU, NVLink pairs, NVSwitch ports, PCIe switch
 * uplinks), transfers over them, and the background copies still in flight. SPDX-License-Identifier: MIT
 *
 * Link sharing (res_xfer): FIFO within a traffic class, processor sharing between demand and background classes;
 * work conserving, O(1) per transfer, deterministic. See docs/simulator.md. The copy path's hot part (a leg, a
 * peer copy over a direct NVLink: sim_xfer_peer) is inline in huvm_sim_internal.h; the rest is here.
 */
#include <stdlib.h>

#include "huvm_sim_internal.h"

/* Double r's ring of background copies (0: no memory, the copy is not tracked). Rare: out of the copy path. */
int sim_tok_grow(sim_res_t *r)
{
    uint32_t cap = r->qcap ? r->qcap * 2 : 64, i;
    sim_tok_t *q = malloc((size_t)cap * sizeof(*q));

    if (!q)
        return 0;
    for (i = 0; i < r->qlen; i++)
        q[i] = *tok_at(r, i);
    free(r->q);
    r->q = q;
    r->qcap = cap;
    r->qhead = 0;
    return 1;
}

/* Demand traffic arriving at `start` took `shared` ns of r from the background class: every background copy
 * still queued ends later, by what it had left at `start` at most (fair share: half rate meanwhile). */
void sim_res_delay(huvm_sim_t *sim, sim_res_t *r, uint64_t start, uint64_t shared)
{
    uint32_t i, hi;

    while (r->qlen && !tok_at(r, 0)->release && tok_at(r, 0)->fin <= start + r->latency_ns)
        tok_pop(sim, r);
    /* The queue's copies end in order (FIFO within the class, and a delay keeps the order: huvm_sim_check), so
     * those that ended by start (not yet retired) are a prefix: found by bisection, not walked. */
    i = 0;
    hi = r->qlen;
    while (i < hi) {
        uint32_t mid = i + (hi - i) / 2;

        if (tok_at(r, mid)->fin - r->latency_ns <= start)
            i = mid + 1;
        else
            hi = mid;
    }
    for (; i < r->qlen; i++) {
        sim_tok_t *k = tok_at(r, i);
        uint64_t end = k->fin - r->latency_ns, d;

        d = u64_min(shared, end - start);
        k->fin += d;
        if (k->chunk != SIM_NIL) {
            sim_chunk_t *c = &sim->chunks[k->chunk];

            if (c->xfer == k->xfer && c->ready_ns < k->fin)
                c->ready_ns = k->fin;
        }
    }
}

/* One leg of a copy, out of line (paths of two legs, host copies): leg_inline. */
static uint64_t leg(huvm_sim_t *sim,
                    sim_res_t *r,
                    uint64_t t,
                    uint64_t bytes,
                    uint64_t svc,
                    int cls,
                    uint32_t ci,
                    uint32_t xfer,
                    uint32_t release)
{
    return leg_inline(sim, r, t, bytes, svc, cls, ci, xfer, release, release != 0);
}

/* GPU g's copy over its PCIe switch's uplink, one direction (ports: sim->sw_h2d or sw_d2h, one port per GPU).
 * A switch arbitrates its uplink between its downstream ports packet by packet (round robin unless configured
 * otherwise: PCI Express Base Specification, "Port Arbitration"), so it is shared, not served first come first
 * served by whole transfers: each class of each port behind the switch is a flow, FIFO within itself, and the
 * flows share the uplink as processor sharing (res_share with each of them, as res_xfer with its other class). Only bytes: the per-block service is the GPU's own
 * (arrival after it, `t`), not the uplink's. */
static uint64_t uplink_leg(huvm_sim_t *sim,
                           uint32_t g,
                           sim_res_t *ports,
                           uint64_t t,
                           uint64_t bytes,
                           int cls,
                           uint32_t ci,
                           uint32_t xfer)
{
    sim_res_t *mine = &ports[g];
    const uint32_t sw = sim->cfg.pcie_switch[g];
    uint64_t dur, start, shared = 0, fin;
    uint32_t h;
    int c;

    while (mine->qlen && tok_at(mine, 0)->fin <= t)
        tok_pop(sim, mine);
    dur = res_ns(mine, bytes);
    start = u64_max(t, mine->busy_until[cls]);
    for (h = 0; h < sim->cfg.gpu_count; h++) {
        sim_res_t *r = &ports[h];

        if (sim->cfg.pcie_switch[h] != sw)
            continue;
        for (c = 0; c < 2; c++) {
            if (h != g || c != cls)
                shared += res_share(sim, r, c, start, dur, c == SIM_BG);
        }
    }
    fin = start + dur + shared;
    mine->busy_until[cls] = fin;
    mine->busy_ns += dur;
    mine->bytes += bytes;
    if (cls == SIM_BG)
        tok_add(sim, mine, fin, ci, xfer, 0);
    return fin;
}

/* Host -> g (chunk ci or SIM_NIL): g's PCIe link and, behind a shared PCIe switch, its port on the switch's
 * uplink (uplink_leg: the bytes, once the block service is done). */
uint64_t sim_xfer_h2d(huvm_sim_t *sim, uint32_t g, uint64_t t, uint64_t bytes, uint64_t svc_ns, int cls, uint32_t ci)
{
    uint64_t fin;
    uint32_t x;

    sim->traffic.host_to_gpu[g] += bytes;
    x = new_xfer(sim, ci);
    fin = leg(sim, &sim->gpus[g].h2d, t, bytes, svc_ns, cls, ci, x, 0);
    if (sim->cfg.pcie_switch[g])
        fin = u64_max(fin, uplink_leg(sim, g, sim->sw_h2d, t + svc_ns, bytes, cls, ci, x));
    return fin;
}

/* g -> host; a background copy holds g's memory until it ends on g's own link (release). */
uint64_t sim_xfer_d2h(huvm_sim_t *sim, uint32_t g, uint64_t t, uint64_t bytes, uint64_t svc_ns, int cls, uint32_t ci)
{
    uint64_t fin;
    uint32_t x;

    sim->traffic.gpu_to_host[g] += bytes;
    x = new_xfer(sim, ci);
    fin = leg(sim, &sim->gpus[g].d2h, t, bytes, svc_ns, cls, ci, x, g + 1);
    if (sim->cfg.pcie_switch[g])
        fin = u64_max(fin, uplink_leg(sim, g, sim->sw_d2h, t + svc_ns, bytes, cls, ci, x));
    return fin;
}

/* a -> b over the pair's direct path, svc ns of per-block service in front of the copy. A direct NVLink (the
 * common case) is one leg, inlined; PCIe peer-to-peer and an NVSwitch take two. */
static SIM_ALWAYS_INLINE uint64_t peer_path(huvm_sim_t *sim,
                                            uint32_t a,
                                            uint32_t b,
                                            uint64_t t,
                                            uint64_t bytes,
                                            uint64_t svc,
                                            int cls,
                                            uint32_t ci,
                                            uint32_t x)
{
    if (sim->cfg.link_type[a][b] == HUVM_LINK_PCIE) {
        /* PCIe peer-to-peer: a's upstream and b's downstream direction (not the switches' uplinks). */
        return u64_max(leg(sim, &sim->gpus[a].d2h, t, bytes, svc, cls, ci, x, a + 1),
                       leg(sim, &sim->gpus[b].h2d, t, bytes, svc, cls, ci, x, 0));
    }
    if (sim->cfg.flags & HUVM_SIM_FLAG_NVSWITCH)
        return u64_max(leg(sim, &sim->gpus[a].port_out, t, bytes, svc, cls, ci, x, a + 1),
                       leg(sim, &sim->gpus[b].port_in, t, bytes, svc, cls, ci, x, 0));
    return leg_inline(sim, &sim->nvl[a][b], t, bytes, svc, cls, ci, x, a + 1, 1);
}

/* a -> b, a remote-mapped read (ci = SIM_NIL, demand class): no migration, so no per-block service. */
uint64_t sim_xfer_peer_raw(huvm_sim_t *sim, uint32_t a, uint32_t b, uint64_t t, uint64_t bytes, int cls, uint32_t ci)
{
    return peer_path(sim, a, b, t, bytes, 0, cls, ci, ci != SIM_NIL ? sim->chunks[ci].xfer : 0);
}

/* A flow outside both classes' FIFOs (a tenant's own collective, NCCL's kernels beside UVM's copy engines) of
 * `bytes` from t: it shares r fairly with the UVM traffic queued when it starts (half rate while that lasts)
 * and pushes that traffic back by the work it did meanwhile; UVM copies that arrive later do not see it (it
 * is short next to them: an approximation, docs/simulator.md). */
static uint64_t res_flow(huvm_sim_t *sim, sim_res_t *r, uint64_t t, uint64_t bytes)
{
    uint64_t dur = res_ns(r, bytes);
    uint64_t other = u64_max(r->busy_until[SIM_FG], r->busy_until[SIM_BG]);
    uint64_t overlap = other > t ? other - t : 0;
    uint64_t shared = dur < overlap ? dur : overlap; /* processor sharing, as res_xfer */
    uint64_t fin = t + dur + shared;
    int c;

    for (c = 0; c < 2 && shared; c++) {
        if (r->busy_until[c] > t)
            r->busy_until[c] += shared;
    }
    if (shared && r->qlen)
        sim_res_delay(sim, r, t, shared);
    r->busy_ns += dur;
    r->bytes += bytes;
    return fin + r->latency_ns;
}

/* a -> b, a tenant's own collective traffic (no per-block service): over the pair's peer path (as peer_path
 * routes it), or through the host (a's upstream, b's downstream PCIe) when the pair has none. */
uint64_t sim_xfer_collective(huvm_sim_t *sim, uint32_t a, uint32_t b, uint64_t t, uint64_t bytes)
{
    sim->traffic.collective[a][b] += bytes;
    if (sim->cfg.link_type[a][b] == HUVM_LINK_NONE || sim->cfg.link_type[a][b] == HUVM_LINK_PCIE)
        return u64_max(res_flow(sim, &sim->gpus[a].d2h, t, bytes), res_flow(sim, &sim->gpus[b].h2d, t, bytes));
    if (sim->cfg.flags & HUVM_SIM_FLAG_NVSWITCH)
        return u64_max(res_flow(sim, &sim->gpus[a].port_out, t, bytes), res_flow(sim, &sim->gpus[b].port_in, t, bytes));
    return res_flow(sim, &sim->nvl[a][b], t, bytes);
}

uint64_t sim_xfer_peer_path(huvm_sim_t *sim,
                            uint32_t a,
                            uint32_t b,
                            uint64_t t,
                            uint64_t bytes,
                            uint64_t svc_ns,
                            int cls,
                            uint32_t ci)
{
    uint32_t x;

    sim->traffic.gpu_to_gpu[a][b] += bytes;
    x = new_xfer(sim, ci);
    return peer_path(sim, a, b, t, bytes, svc_ns, cls, ci, x);
}

/* Pop r's copies that ended by t (each frees one chunk of the queue's GPU); lower *lb to its next end. Returns
 * how many were popped. */
static inline uint64_t retire_queue(sim_res_t *r, uint64_t t, uint64_t *lb)
{
    const uint32_t mask = r->qcap - 1;
    uint32_t head = r->qhead, len = r->qlen;
    uint64_t n;

    while (len && r->q[head].fin <= t) {
        head = (head + 1) & mask;
        len--;
    }
    n = r->qlen - len;
    r->qhead = head;
    r->qlen = len;
    if (len && r->q[head].fin < *lb)
        *lb = r->q[head].fin;
    return n;
}

/* Copies out of g still in flight at t that have ended give g its memory back (sim_gpu_retire: the walk).
 *
 * Every copy queued on g's d2h, port_out and nvl[g][*] frees g's memory (release g + 1), and only this
 * function pops them (leg and res_delay pop copies that free nothing), one queue head at a time. So once the
 * queues are walked, the earliest head is a lower bound on the next head that can end: later heads are those
 * already queued (a demand copy only pushes them later, res_delay) or new copies (tok_add lowers the bound).
 * Before the bound there is nothing to pop, and the walk is skipped (sim_gpu_retire): same pops, same order. */
void sim_gpu_retire_walk(huvm_sim_t *sim, uint32_t g, uint64_t t)
{
    sim_gpu_t *gg = &sim->gpus[g];
    uint64_t lb = UINT64_MAX, n = 0;
    uint32_t b;

    /* every copy on these queues frees g's memory (release g + 1): tok_pop's decrement, counted */
    if (gg->d2h.qlen)
        n += retire_queue(&gg->d2h, t, &lb);
    if (gg->port_out.qlen)
        n += retire_queue(&gg->port_out, t, &lb);
    for (b = 0; b < sim->cfg.gpu_count; b++) {
        if (sim->nvl[g][b].qlen)
            n += retire_queue(&sim->nvl[g][b], t, &lb);
    }
    gg->inflight -= n;
    gg->inflight_lb = lb;
}

/* When the first copy out of g still in flight ends (UINT64_MAX: none). */
uint64_t sim_gpu_inflight_next(const huvm_sim_t *sim, uint32_t g)
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

uint64_t huvm_sim_path_probe(huvm_sim_t *sim, uint32_t path, uint32_t gpu, uint32_t chunks)
{
    uint64_t fin = 0;
    uint32_t i;

    if (sim->started || gpu >= sim->cfg.gpu_count || path > HUVM_SIM_PATH_EVICT)
        return 0;
    for (i = 0; i < chunks; i++) {
        if (path == HUVM_SIM_PATH_EVICT)
            fin = sim_xfer_d2h(sim, gpu, 0, SIM_CHUNK, sim->cfg.evict_service_ns, SIM_BG, SIM_NIL);
        else
            fin = sim_xfer_h2d(sim,
                               gpu,
                               0,
                               SIM_CHUNK,
                               path == HUVM_SIM_PATH_PREFETCH ? sim->cfg.migrate_service_ns : 0,
                               SIM_BG,
                               SIM_NIL);
    }
    return fin;
}

/* Free the queues of background copies of every link. */
void sim_links_free(huvm_sim_t *sim)
{
    uint32_t i;

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
}
