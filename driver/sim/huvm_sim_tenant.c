/*
 * huvm: simulated node, tenants: their traces (copied, validated, indexed by op) and running one op of a
 * tenant: its allocations, its chunk touches (faults in batches of fault_batch_max, serviced by the paging
 * model), its compute and remote-mapped reads, its frees, its step ends. SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "huvm_sim_internal.h"

void sim_tenant_free(sim_tenant_t *t)
{
    free(t->op_time);
    free(t->first);
    free(t->touch);
    free(t->mode);
    free(t->pages);
    free(t->aop);
    free(t->fop);
    free(t->alloc_first);
    free(t->alloc_list);
    free(t->free_first);
    free(t->free_list);
    free(t->static_list);
    free(t->step_end);
    free(t->link_bytes);
    free(t->op_end);
    memset(t, 0, sizeof(*t));
}

static void *dup_array(const void *src, size_t n, size_t size)
{
    void *p = malloc(n ? n * size : 1);

    if (p && n)
        memcpy(p, src, n * size);
    return p;
}

/* Build a CSR list of chunks keyed by op (alloc or free op) for ops 0..n_ops-1. */
static int build_csr(const int32_t *key, uint32_t n_chunks, uint32_t n_ops, uint32_t **first_out, uint32_t **list_out)
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

static uint32_t tenant_validate(const huvm_sim_t *sim,
                                uint32_t idx,
                                const huvm_sim_tenant_spec_t *s,
                                huvm_sim_error_t *err)
{
    char f[64];
    uint32_t k, i, c;

#define TFIELD(name) (snprintf(f, sizeof(f), "tenants[%u].%s", idx, name), f)
    if (s->gpu >= sim->cfg.gpu_count) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("gpu"),
                      "tenant %u: GPU %u is not in 0..%u",
                      idx,
                      s->gpu,
                      sim->cfg.gpu_count - 1);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->managed > 1) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("managed"),
                      "tenant %u: managed must be 0 or 1",
                      idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->host_resident > 1 || (s->host_resident && !s->managed)) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("host_resident"),
                      "tenant %u: host_resident must be 0 or 1, and 1 only for managed memory",
                      idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->steps > SIM_MAX_STEPS) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("steps"),
                      "tenant %u: %u steps is over %u",
                      idx,
                      s->steps,
                      SIM_MAX_STEPS);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->static_bytes > SIM_MAX_OP_NS || s->start_ns > SIM_MAX_OP_NS) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD(s->start_ns > SIM_MAX_OP_NS ? "start_ns" : "static_bytes"),
                      "tenant %u: value out of range",
                      idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->n_chunks > (1u << 28) || (uint64_t)sim->n_chunks + s->n_chunks > (1u << 30)) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("n_chunks"),
                      "tenant %u: %u chunks is too many (at most 2^30 on the node)",
                      idx,
                      s->n_chunks);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->record_ops > 1) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("record_ops"),
                      "tenant %u: record_ops must be 0 or 1",
                      idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (((s->link_send_mask | s->link_recv_mask) >> sim->cfg.gpu_count) ||
        ((s->link_send_mask | s->link_recv_mask) & (1u << s->gpu))) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD((s->link_send_mask >> sim->cfg.gpu_count) || (s->link_send_mask & (1u << s->gpu))
                                 ? "link_send_mask"
                                 : "link_recv_mask"),
                      "tenant %u: collective peers must be other GPUs of the node (0..%u, not %u)",
                      idx,
                      sim->cfg.gpu_count - 1,
                      s->gpu);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->n_ops == 0)
        return HUVM_NV_OK;
    if ((s->link_send_mask | s->link_recv_mask) && !s->op_link_bytes) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("op_link_bytes"),
                      "tenant %u: collective peers given without op_link_bytes",
                      idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (!s->op_time_ns || !s->op_first_touch || (s->n_touches && (!s->touch_chunk || !s->touch_mode)) ||
        (s->n_chunks && (!s->chunk_alloc_op || !s->chunk_free_op))) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("arrays"),
                      "tenant %u: a trace array is missing",
                      idx);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (s->op_first_touch[0] != 0 || s->op_first_touch[s->n_ops] != s->n_touches) {
        sim_set_error(err,
                      HUVM_NV_ERR_INVALID_ARGUMENT,
                      -1,
                      TFIELD("op_first_touch"),
                      "tenant %u: op_first_touch must run from 0 to n_touches (%u)",
                      idx,
                      s->n_touches);
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    for (k = 0; k < s->n_ops; k++) {
        if (s->op_first_touch[k + 1] < s->op_first_touch[k]) {
            sim_set_error(err,
                          HUVM_NV_ERR_INVALID_ARGUMENT,
                          (int32_t)k,
                          TFIELD("op_first_touch"),
                          "tenant %u: op %u: touch offsets decrease",
                          idx,
                          k);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        if (s->op_link_bytes && s->op_link_bytes[k] > SIM_MAX_OP_NS) {
            sim_set_error(err,
                          HUVM_NV_ERR_INVALID_ARGUMENT,
                          (int32_t)k,
                          TFIELD("op_link_bytes"),
                          "tenant %u: op %u: %llu collective bytes is out of range",
                          idx,
                          k,
                          (unsigned long long)s->op_link_bytes[k]);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        if (s->op_time_ns[k] > SIM_MAX_OP_NS) {
            sim_set_error(err,
                          HUVM_NV_ERR_INVALID_ARGUMENT,
                          (int32_t)k,
                          TFIELD("op_time_ns"),
                          "tenant %u: op %u: time %llu ns is out of range",
                          idx,
                          k,
                          (unsigned long long)s->op_time_ns[k]);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
    }
    for (c = 0; c < s->n_chunks; c++) {
        int32_t a = s->chunk_alloc_op[c], fr = s->chunk_free_op[c];

        if (a < -1 || a >= (int32_t)s->n_ops || fr < -1 || fr >= (int32_t)s->n_ops) {
            sim_set_error(err,
                          HUVM_NV_ERR_INVALID_ARGUMENT,
                          (int32_t)c,
                          TFIELD(a < -1 || a >= (int32_t)s->n_ops ? "chunk_alloc_op" : "chunk_free_op"),
                          "tenant %u: chunk %u: alloc op %d / free op %d not in -1..%u",
                          idx,
                          c,
                          a,
                          fr,
                          s->n_ops - 1);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        if (a >= 0 && fr >= 0 && fr < a) {
            sim_set_error(err,
                          HUVM_NV_ERR_INVALID_ARGUMENT,
                          (int32_t)c,
                          TFIELD("chunk_free_op"),
                          "tenant %u: chunk %u is freed at op %d before its allocation at op %d",
                          idx,
                          c,
                          fr,
                          a);
            return HUVM_NV_ERR_INVALID_ARGUMENT;
        }
    }
    for (k = 0; k < s->n_ops; k++) {
        for (i = s->op_first_touch[k]; i < s->op_first_touch[k + 1]; i++) {
            uint32_t ch = s->touch_chunk[i];

            if (ch >= s->n_chunks) {
                sim_set_error(err,
                              HUVM_NV_ERR_INVALID_ARGUMENT,
                              (int32_t)i,
                              TFIELD("touch_chunk"),
                              "tenant %u: op %u touch %u references chunk %u, but the trace has %u chunks",
                              idx,
                              k,
                              i,
                              ch,
                              s->n_chunks);
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
            if ((s->chunk_alloc_op[ch] >= 0 && (uint32_t)s->chunk_alloc_op[ch] > k) ||
                (s->chunk_free_op[ch] >= 0 && (uint32_t)s->chunk_free_op[ch] < k)) {
                sim_set_error(err,
                              HUVM_NV_ERR_INVALID_ARGUMENT,
                              (int32_t)i,
                              TFIELD("touch_chunk"),
                              "tenant %u: op %u touch %u references chunk %u outside its life (ops %d..%d)",
                              idx,
                              k,
                              i,
                              ch,
                              s->chunk_alloc_op[ch],
                              s->chunk_free_op[ch]);
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
            if (s->touch_mode[i] > 2) {
                sim_set_error(err,
                              HUVM_NV_ERR_INVALID_ARGUMENT,
                              (int32_t)i,
                              TFIELD("touch_mode"),
                              "tenant %u: op %u touch %u has mode %u (0 read, 1 write-new, 2 rmw)",
                              idx,
                              k,
                              i,
                              s->touch_mode[i]);
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
            if (s->touch_pages && s->touch_pages[i] == 0) {
                sim_set_error(err,
                              HUVM_NV_ERR_INVALID_ARGUMENT,
                              (int32_t)i,
                              TFIELD("touch_pages"),
                              "tenant %u: op %u touch %u touches no 64 KiB group of its block (mask 0)",
                              idx,
                              k,
                              i);
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
    uint32_t *pop;
    uint64_t *fetched;
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
        if (spec->touch_pages && spec->n_touches) {
            t->pages = dup_array(spec->touch_pages, spec->n_touches, sizeof(uint32_t));
            if (!t->pages)
                goto nomem;
        }
        if (spec->op_link_bytes && (spec->link_send_mask | spec->link_recv_mask)) {
            t->link_bytes = dup_array(spec->op_link_bytes, spec->n_ops, sizeof(uint64_t));
            if (!t->link_bytes)
                goto nomem;
        }
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
    }
    else {
        t->spec.n_chunks = 0;
        t->spec.n_touches = 0;
    }
    t->spec.op_time_ns = t->op_time;
    t->spec.op_first_touch = t->first;
    t->spec.touch_chunk = t->touch;
    t->spec.touch_mode = t->mode;
    t->spec.touch_pages = t->pages;
    t->spec.chunk_alloc_op = t->aop;
    t->spec.chunk_free_op = t->fop;
    t->spec.op_link_bytes = t->link_bytes;
    if (!t->link_bytes)
        t->spec.link_send_mask = t->spec.link_recv_mask = 0;
    t->foreground = t->spec.n_ops > 0 && t->spec.steps > 0;
    t->static_chunks = (spec->static_bytes + SIM_CHUNK - 1) / SIM_CHUNK;
    t->chunk_base = sim->n_chunks;
    if (t->spec.n_chunks) {
        /* aligned to a cache line: each chunk lies in one (the touch loop reads one line per touch) */
        chunks =
            aligned_alloc(64, (((size_t)sim->n_chunks + t->spec.n_chunks) * sizeof(sim_chunk_t) + 63) & ~(size_t)63);
        if (!chunks)
            goto nomem;
        if (sim->n_chunks)
            memcpy(chunks, sim->chunks, (size_t)sim->n_chunks * sizeof(sim_chunk_t));
        free(sim->chunks);
        sim->chunks = chunks;
        pop = realloc(sim->pop, ((size_t)sim->n_chunks + t->spec.n_chunks) * sizeof(uint32_t));
        if (!pop)
            goto nomem;
        sim->pop = pop;
        memset(pop + sim->n_chunks, 0, (size_t)t->spec.n_chunks * sizeof(uint32_t));
        fetched = realloc(sim->fetched, ((size_t)sim->n_chunks + t->spec.n_chunks) * sizeof(uint64_t));
        if (!fetched)
            goto nomem;
        sim->fetched = fetched;
        memset(fetched + sim->n_chunks, 0, (size_t)t->spec.n_chunks * sizeof(uint64_t));
        if (huvm_sim_thr_grow(&sim->thr, sim->n_chunks + t->spec.n_chunks))
            goto nomem;
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
    sim_tenant_free(t);
    sim_set_error(err, HUVM_NV_ERR_NO_MEMORY, -1, "tenant", "out of memory copying tenant %u", idx);
    return -1;
}

/* ---- running an op ---- */

static void make_live(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t ci, uint64_t *t)
{
    sim_chunk_t *c = &sim->chunks[ci];

    if (c->flags & SIM_CF_LIVE)
        return;
    c->flags |= SIM_CF_LIVE;
    if (!tt->spec.managed)
        *t = sim_pin_chunk(sim, tt->spec.gpu, ci, *t);
}

/* A host-resident tenant's chunk at its start: in host memory, as if the CPU had written it. */
static void place_on_host(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t ci)
{
    sim_chunk_t *c = &sim->chunks[ci];

    if (c->loc != HUVM_SIM_LOC_NONE || host_take_chunk(sim))
        return;
    c->loc = HUVM_SIM_LOC_HOST;
    sim->pop[ci] = HUVM_SIM_PAGES_ALL;    /* written by the CPU: every page holds data */
    sim->gpus[tt->spec.gpu].host_chunks++;
}

static void end_batch(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t nb, uint64_t t)
{
    sim_gpu_t *gg = &sim->gpus[tt->spec.gpu];

    gg->burst_chunks = gg->batch_allocs;
    gg->batch_allocs = 0;
    note_own(sim, tt->spec.gpu, t);
    huvm_account_faults(&sim->core, tt->spec.gpu, nb * sim->cfg.faults_per_chunk);
    tt->res.fault_batches++;
    if (sim->proto_prefetch)
        sim_proto_batch(sim, tt);
    sim_preevict(sim, tt->spec.gpu, t, 0);
}

void sim_tenant_start(huvm_sim_t *sim, sim_tenant_t *tt)
{
    uint64_t t = tt->clock, k;
    uint32_t i;

    tt->res.start_ns = tt->clock;
    for (k = 0; k < tt->static_chunks && !sim->failed; k++)
        t = sim_pin_chunk(sim, tt->spec.gpu, SIM_NIL, t);
    for (i = 0; i < tt->n_static && !sim->failed; i++) {
        make_live(sim, tt, tt->chunk_base + tt->static_list[i], &t);
        if (tt->spec.host_resident)
            place_on_host(sim, tt, tt->chunk_base + tt->static_list[i]);
    }
    tt->res.alloc_stall_ns += t - tt->clock;
    tt->clock = t;
    tt->step_start = t;
    if (tt->spec.n_ops == 0) {
        tt->state = SIM_T_DONE;
        tt->res.done = 1;
        tt->res.end_ns = t;
    }
    else {
        tt->state = SIM_T_RUNNING;
    }
}

/* Op op's collectives from t: its bytes to every send peer and from every receive peer; when the last ends. */
static uint64_t run_collectives(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t op, uint64_t t)
{
    const uint32_t g = tt->spec.gpu;
    const uint64_t bytes = tt->link_bytes[op];
    uint64_t fin = t;
    uint32_t p;

    for (p = 0; p < sim->cfg.gpu_count; p++) {
        if (tt->spec.link_send_mask & (1u << p))
            fin = u64_max(fin, sim_xfer_collective(sim, g, p, t, bytes));
        if (tt->spec.link_recv_mask & (1u << p))
            fin = u64_max(fin, sim_xfer_collective(sim, p, g, t, bytes));
    }
    return fin;
}

/* Keep an op's end time (record_ops); past HUVM_SIM_MAX_OP_RECORDS, or without memory, the rest is dropped. */
static void record_op(sim_tenant_t *tt, uint64_t end)
{
    if (tt->op_end_n == tt->op_end_cap && tt->op_end_cap < HUVM_SIM_MAX_OP_RECORDS) {
        uint32_t cap = tt->op_end_cap ? tt->op_end_cap * 2 : 256;
        uint64_t *p = realloc(tt->op_end, (size_t)cap * sizeof(uint64_t));

        if (p) {
            tt->op_end = p;
            tt->op_end_cap = cap;
        }
    }
    if (tt->op_end_n < tt->op_end_cap)
        tt->op_end[tt->op_end_n++] = end;
}

void sim_run_op(huvm_sim_t *sim, sim_tenant_t *tt)
{
    const uint32_t g = tt->spec.gpu, base = tt->chunk_base, op = tt->op;
    sim_chunk_t *const ch = sim->chunks;
    const uint32_t *touch = tt->touch, *pages = tt->pages;
    uint64_t t, fault_start, compute_end, end;
    uint64_t *const remote_bytes = tt->remote_bytes;
    uint32_t remote_mask, nb, entries, i, e;

    if (tt->in_op) {
        /* resumed where it yielded */
        t = tt->at;
        fault_start = tt->fault_start;
        remote_mask = tt->remote_mask;
        nb = tt->op_nb;
        entries = tt->op_entries;
        i = tt->op_i;
    }
    else {
        t = tt->clock;
        remote_mask = 0;
        nb = 0;
        entries = 0;
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
        i = tt->first[op];
        if (t > sim->yield_ns)
            goto yield;
    }
    for (e = tt->first[op + 1]; i < e; i++) {
        const uint32_t ci = base + touch[i];
        sim_chunk_t *c = &ch[ci];
        uint32_t want;
        int remote;

        /* huvm-atc22: the prototype's prefetch items that have started by now move their blocks first */
        if (sim->proto_prefetch && !(c->loc == HUVM_SIM_LOC_GPU && c->holder == g))
            sim_proto_flush(sim, g, t);
        if (c->loc == HUVM_SIM_LOC_GPU) {
            /* resident: all the groups it touches are on its GPU (a partly resident block faults); a tenant
             * without touch_pages only ever holds whole blocks, so its touches need no mask test */
            if (c->holder == g && (!pages || (c->pages & pages[i]) == pages[i])) {
                if (c->flags & SIM_CF_PREFETCHED)
                    pf_note(sim, c, 1);
                if (c->ready_ns > t) {
                    tt->res.inflight_wait_ns += c->ready_ns - t;
                    t = c->ready_ns;
                    if (t > sim->yield_ns && i + 1 < e) {
                        i++;
                        goto yield;
                    }
                }
                continue;
            }
            if (c->holder != g && (c->flags & SIM_CF_REMOTE)) {
                want = pages ? pages[i] : HUVM_SIM_PAGES_ALL;
                remote_bytes[c->holder] =
                    (remote_mask & (1u << c->holder)) ? remote_bytes[c->holder] + pages_bytes(want) : pages_bytes(want);
                remote_mask |= 1u << c->holder;
                tt->res.remote_touches++;
                continue;
            }
        }
        if (sim->failed)
            break;
        if (nb == 0) {
            t += sim->cfg.fault_batch_ns;
            tt->batch_lo = SIM_NIL;
            tt->batch_hi = 0;
            tt->batch_start = t;
        }
        tt->batch_lo = ci < tt->batch_lo ? ci : tt->batch_lo;
        tt->batch_hi = ci > tt->batch_hi ? ci : tt->batch_hi;
        want = pages ? pages[i] : HUVM_SIM_PAGES_ALL;
        if (sim->cfg.fault_entries_per_group) {
            /* the groups this touch faults on (not on its GPU) fill the batch, each as that many entries */
            const uint32_t held = c->loc == HUVM_SIM_LOC_GPU && c->holder == g ? c->pages : 0;

            entries += sim->cfg.fault_entries_per_group * (uint32_t)__builtin_popcount(want & ~held);
        }
        t = sim_service_fault(sim, tt, ci, want, t, &remote);
        tt->res.faults++;
        if (remote) {
            remote_bytes[c->holder] =
                (remote_mask & (1u << c->holder)) ? remote_bytes[c->holder] + pages_bytes(want) : pages_bytes(want);
            remote_mask |= 1u << c->holder;
            tt->res.remote_touches++;
        }
        if (++nb == sim->cfg.fault_batch_max || entries >= sim->cfg.fault_batch_max) {
            end_batch(sim, tt, nb, t);
            nb = 0;
            entries = 0;
        }
        if (t > sim->yield_ns && i + 1 < e) {
            i++;
            goto yield;
        }
    }
    tt->in_op = 0;
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
                end = u64_max(end, sim_xfer_peer_raw(sim, h, g, t, remote_bytes[h], SIM_FG, SIM_NIL));
                lend_charge(sim, h, remote_bytes[h] / SIM_CHUNK);
            }
        }
        tt->res.remote_stall_ns += end - compute_end;
    }
    if (tt->link_bytes && tt->link_bytes[op]) {
        uint64_t comm = run_collectives(sim, tt, op, t);

        if (comm > end) {
            tt->res.link_stall_ns += comm - end;
            end = comm;
        }
    }
    tt->res.compute_ns += tt->op_time[op];
    for (i = tt->free_first[op]; i < tt->free_first[op + 1]; i++)
        sim_release_chunk(sim, base + tt->free_list[i]);
    tt->clock = end;
    tt->res.ops_done++;
    if (tt->spec.record_ops)
        record_op(tt, end);
    if (!sim->failed && tt->res.fault_batches)
        sim_preevict(sim, g, end, 0);
    else if (!sim->failed && sim->gpus[g].guest_chunks)
        sim_preevict(sim, g, end, 1); /* a cudaMalloc lender: its allocations kick the give-back worker */
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
        }
        else if (!tt->foreground && end == tt->step_start) {
            /* A background trace whose step takes no time would loop forever at one instant: it is done. */
            tt->state = SIM_T_DONE;
            tt->res.done = 1;
            tt->res.end_ns = end;
        }
        tt->step_start = end;
    }
    return;

yield:
    __attribute__((cold));
    /* Another tenant's clock is behind this op's: let it catch up first, so that copies and fault services reach
     * the links and the GPUs in time order (a link serves its queue in arrival order, and an op's faults reserve
     * it ahead of a tenant that has not got there yet). Checked only where the op's clock moves (a fault, a wait
     * for a copy in flight) and a touch is left, not on a resident touch. */
    tt->in_op = 1;
    tt->at = t;
    tt->fault_start = fault_start;
    tt->remote_mask = remote_mask;
    tt->op_nb = nb;
    tt->op_entries = entries;
    tt->op_i = i;
}
