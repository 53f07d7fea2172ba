/*
 * huvm: C-level tests of the simulated node (run plain and under ASan/UBSan by `make sim-test`).
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "huvm_sim_internal.h"
#include "sim_check.h"

#define MIB (1024ull * 1024ull)

/* A streaming trace: n_ops ops, each touching `per_op` consecutive chunks of a ws-chunk working set,
 * cycling; all chunks live throughout. */
typedef struct {
    uint64_t *op_time;
    uint32_t *first, *touch;
    uint8_t *mode;
    int32_t *aop, *fop;
    uint32_t n_ops, n_chunks, n_touches;
} trace_t;

static void trace_stream(trace_t *t, uint32_t ws, uint32_t n_ops, uint32_t per_op, uint64_t op_ns)
{
    uint32_t k, i, n = 0;

    t->n_ops = n_ops;
    t->n_chunks = ws;
    t->n_touches = n_ops * per_op;
    t->op_time = malloc(n_ops * sizeof(uint64_t));
    t->first = malloc((n_ops + 1) * sizeof(uint32_t));
    t->touch = malloc(t->n_touches * sizeof(uint32_t));
    t->mode = calloc(t->n_touches, 1);
    t->aop = malloc(ws * sizeof(int32_t));
    t->fop = malloc(ws * sizeof(int32_t));
    for (k = 0; k < n_ops; k++) {
        t->op_time[k] = op_ns;
        t->first[k] = n;
        for (i = 0; i < per_op; i++)
            t->touch[n++] = (k * per_op + i) % ws;
    }
    t->first[n_ops] = n;
    for (i = 0; i < ws; i++) {
        t->aop[i] = -1;
        t->fop[i] = -1;
    }
}

static void trace_free(trace_t *t)
{
    free(t->op_time);
    free(t->first);
    free(t->touch);
    free(t->mode);
    free(t->aop);
    free(t->fop);
}

static void spec_from(huvm_sim_tenant_spec_t *s, const trace_t *t, uint32_t gpu, uint32_t steps)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "t%u", gpu);
    s->gpu = gpu;
    s->managed = 1;
    s->steps = steps;
    s->n_ops = t->n_ops;
    s->n_chunks = t->n_chunks;
    s->n_touches = t->n_touches;
    s->op_time_ns = t->op_time;
    s->op_first_touch = t->first;
    s->touch_chunk = t->touch;
    s->touch_mode = t->mode;
    s->chunk_alloc_op = t->aop;
    s->chunk_free_op = t->fop;
}

static void node2(huvm_sim_config_t *cfg, uint64_t mem)
{
    huvm_sim_config_defaults(cfg);
    cfg->gpu_count = 2;
    cfg->gpu_memory_bytes[0] = cfg->gpu_memory_bytes[1] = mem;
    cfg->pcie_mbyte_per_s[0] = cfg->pcie_mbyte_per_s[1] = 12000;
    cfg->link_type[0][1] = cfg->link_type[1][0] = HUVM_LINK_NVLINK_2;
    cfg->link_count[0][1] = cfg->link_count[1][0] = 2;
    cfg->link_mbyte_per_s[0][1] = cfg->link_mbyte_per_s[1][0] = 50000;
    cfg->sample_interval_ns = 100000;
    cfg->max_samples = 64;
}

static void set_roles(huvm_sim_t *sim, uint32_t r0, uint32_t r1)
{
    HUVM_GET_POLICY_PARAMS get;
    HUVM_SET_POLICY_PARAMS set;

    memset(&get, 0, sizeof(get));
    get.hdr.abi_version = HUVM_ABI_VERSION;
    get.hdr.size = sizeof(get);
    CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_GET_POLICY, &get, sizeof(get)) == HUVM_NV_OK);
    memset(&set, 0, sizeof(set));
    set.hdr.abi_version = HUVM_ABI_VERSION;
    set.hdr.size = sizeof(set);
    set.policy = get.policy;
    set.policy.generation = 0;
    CHECK(set.policy.gpu_count == 2);
    set.policy.gpus[0].role = r0;
    set.policy.gpus[1].role = r1;
    CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_SET_POLICY, &set, sizeof(set)) == HUVM_NV_OK);
    CHECK(set.rmStatus == HUVM_NV_OK);
}

typedef struct {
    huvm_sim_tenant_result_t r0;
    HUVM_GET_STATS_PARAMS stats;
    huvm_sim_traffic_t traffic;
} outcome_t;

/* 1: the next run_pair updates the core's counters atomically, as the kernel does (not single-writer). */
static int g_atomic_counters;

/* Harvester on GPU 0 streaming over 1.5x its memory; GPU 1 idle (static 8 MiB). */
static void run_pair(uint32_t preset, outcome_t *out, uint32_t lender_pin_op)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    trace_t t, lt;
    huvm_sim_t *sim;
    huvm_sim_tenant_result_t r;

    node2(&cfg, 64 * MIB);
    sim = huvm_sim_create(&cfg, preset, &err);
    CHECK(sim != NULL);
    if (!sim)
        return;
    CHECK(sim->core.single_writer == 1);
    if (g_atomic_counters)
        sim->core.single_writer = 0;
    trace_stream(&t, 48, 96, 4, 20000);
    spec_from(&s, &t, 0, 4);
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
    memset(&s, 0, sizeof(s));
    snprintf(s.name, sizeof(s.name), "idle");
    s.gpu = 1;
    s.static_bytes = 8 * MIB;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 1);
    if (lender_pin_op) {
        /* A lender whose cudaMalloc footprint rises mid-run: chunk i allocated at op lender_pin_op. */
        uint32_t i;

        trace_stream(&lt, 24, 200, 1, 200000);
        for (i = 0; i < lt.n_chunks; i++)
            lt.aop[i] = (int32_t)lender_pin_op;
        for (i = 0; i < lt.n_touches; i++)
            lt.touch[i] = lt.first[lender_pin_op] <= i ? lt.touch[i] : 0;
        for (i = 0; i < lender_pin_op; i++)
            lt.first[i + 1] = 0;
        spec_from(&s, &lt, 1, 0);
        s.managed = 0;
        CHECK(huvm_sim_add_tenant(sim, &s, &err) == 2);
    }
    if (preset != HUVM_PRESET_STOCK)
        set_roles(sim, HUVM_ROLE_HARVESTER, HUVM_ROLE_LENDER);
    CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_OK);
    if (err.status)
        fprintf(stderr, "run error: %s: %s\n", err.field, err.message);
    CHECK(huvm_sim_finished(sim));
    CHECK(huvm_sim_check(sim, &err) == 0);
    CHECK(huvm_sim_tenant_result(sim, 0, &r) == HUVM_NV_OK);
    CHECK(r.done && r.steps_done == 4 && r.touches == 4ull * 96 * 4);
    CHECK(huvm_sim_sample_count(sim) > 0 && huvm_sim_sample_count(sim) <= 64);
    memset(out, 0, sizeof(*out));
    out->r0 = r;
    out->stats.hdr.abi_version = HUVM_ABI_VERSION;
    out->stats.hdr.size = sizeof(out->stats);
    CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_GET_STATS, &out->stats, sizeof(out->stats)) == HUVM_NV_OK);
    huvm_sim_traffic(sim, &out->traffic);
    huvm_sim_destroy(sim);
    trace_free(&t);
    if (lender_pin_op)
        trace_free(&lt);
}

static void test_policies(void)
{
    outcome_t stock, huvm, again, gb;
    const huvm_gpu_counters_t *c;

    run_pair(HUVM_PRESET_STOCK, &stock, 0);
    run_pair(HUVM_PRESET_HUVM, &huvm, 0);
    run_pair(HUVM_PRESET_HUVM, &again, 0);
    c = &stock.stats.gpus[0];
    CHECK(c->evict_to_peer == 0 && c->evict_to_host > 0 && c->fetch_from_host > 0);
    CHECK(c->faults == stock.r0.faults);
    c = &huvm.stats.gpus[0];
    CHECK(c->evict_to_peer > 0);
    CHECK(huvm.r0.runtime_ns < stock.r0.runtime_ns);
    /* Determinism: same inputs, same outputs, bit for bit (timestamps included). */
    CHECK(memcmp(&huvm, &again, sizeof(huvm)) == 0);
    /* Conservation: what GPU 0 evicted to peer 1 minus what came back (or was given back) is held there. */
    CHECK((huvm.stats.pairs[0][1].evict_chunks + huvm.stats.pairs[0][1].prefetch_chunks -
           huvm.stats.pairs[0][1].fetch_chunks - huvm.stats.pairs[0][1].giveback_chunks) *
              SIM_CHUNK ==
          huvm.stats.pairs[0][1].held_bytes);
    CHECK(huvm.stats.gpus[1].lent_bytes == huvm.stats.pairs[0][1].held_bytes);
    /* Give-back: a lender that cudaMallocs 48 MiB mid-run takes its memory back. */
    run_pair(HUVM_PRESET_HUVM, &gb, 20);
    CHECK(gb.stats.gpus[1].giveback > 0);
    CHECK(gb.stats.pairs[0][1].giveback_chunks == gb.stats.gpus[1].giveback);
    /* The simulator's single-writer counters give exactly what the kernel's atomic ones do. */
    g_atomic_counters = 1;
    run_pair(HUVM_PRESET_HUVM, &again, 20);
    g_atomic_counters = 0;
    CHECK(memcmp(&gb, &again, sizeof(gb)) == 0);
}

static void expect_cfg_error(huvm_sim_config_t *cfg, const char *field)
{
    huvm_sim_error_t err;
    huvm_sim_t *sim = huvm_sim_create(cfg, HUVM_PRESET_HUVM, &err);

    CHECK(sim == NULL);
    CHECK(strcmp(err.field, field) == 0);
    if (strcmp(err.field, field))
        fprintf(stderr, "expected field %s, got %s (%s)\n", field, err.field, err.message);
    huvm_sim_destroy(sim);
}

static void test_bad_input(void)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_t *sim;
    trace_t t;

    node2(&cfg, 64 * MIB);
    cfg.gpu_reserved_bytes[1] = 64 * MIB;
    expect_cfg_error(&cfg, "gpus[1].reserved_bytes");
    node2(&cfg, 64 * MIB);
    cfg.pcie_mbyte_per_s[0] = 0;
    expect_cfg_error(&cfg, "gpus[0].pcie_mbyte_per_s");
    node2(&cfg, 64 * MIB);
    cfg.pcie_switch[1] = 17;
    expect_cfg_error(&cfg, "gpus[1].pcie_switch");
    node2(&cfg, 64 * MIB);
    cfg.pcie_switch[0] = 2;                 /* switch 2 without an uplink bandwidth */
    expect_cfg_error(&cfg, "pcie_switch_mbyte_per_s[1]");
    node2(&cfg, 64 * MIB);
    cfg.lend_chunk_ns = 2000000000ull;
    expect_cfg_error(&cfg, "lend_chunk_ns");
    node2(&cfg, 64 * MIB);
    cfg.link_mbyte_per_s[1][0] = 0;
    expect_cfg_error(&cfg, "links[1][0].mbyte_per_s");
    node2(&cfg, 64 * MIB);
    cfg.gpu_count = 17;
    expect_cfg_error(&cfg, "gpu_count");
    node2(&cfg, 64 * MIB);
    cfg.link_type[0][1] = HUVM_LINK_NONE;
    expect_cfg_error(&cfg, "links[0][1].link_type");
    node2(&cfg, 64 * MIB);
    cfg.prefetch_threshold = 0;
    expect_cfg_error(&cfg, "prefetch_threshold");
    node2(&cfg, 64 * MIB);
    cfg.prefetch_threshold = 101;
    expect_cfg_error(&cfg, "prefetch_threshold");
    node2(&cfg, 64 * MIB);
    cfg.fault_entries_per_group = 17;
    expect_cfg_error(&cfg, "fault_entries_per_group");
    CHECK(huvm_sim_create(NULL, 0, &err) == NULL);

    node2(&cfg, 64 * MIB);
    sim = huvm_sim_create(&cfg, HUVM_PRESET_STOCK, &err);
    CHECK(sim != NULL);
    trace_stream(&t, 8, 4, 2, 1000);
    t.touch[5] = 9;
    spec_from(&s, &t, 0, 1);
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == -1);
    CHECK(strcmp(err.field, "tenants[0].touch_chunk") == 0 && err.record == 5);
    t.touch[5] = 1;
    t.aop[1] = 3;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == -1);
    CHECK(strcmp(err.field, "tenants[0].touch_chunk") == 0);
    t.aop[1] = -1;
    s.gpu = 2;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == -1 && strcmp(err.field, "tenants[0].gpu") == 0);
    s.gpu = 0;
    t.first[4] = 7;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == -1 && strcmp(err.field, "tenants[0].op_first_touch") == 0);
    t.first[4] = 8;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
    /* An idle tenant that pins more than the GPU has: a run-time error naming the tenants. */
    memset(&s, 0, sizeof(s));
    s.gpu = 1;
    s.static_bytes = 128 * MIB;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 1);
    CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_ERR_NO_MEMORY);
    CHECK(strcmp(err.field, "tenants") == 0);
    /* ioctl: bad sizes and test commands are refused without crashing. */
    {
        HUVM_GET_INFO_PARAMS info;
        HUVM_TEST_EVENT_PARAMS ev;

        memset(&info, 0, sizeof(info));
        info.hdr.abi_version = HUVM_ABI_VERSION;
        info.hdr.size = sizeof(info);
        CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_GET_INFO, &info, sizeof(info)) == HUVM_NV_OK);
        CHECK(info.backend == HUVM_BACKEND_SIM && info.gpu_count == 2);
        CHECK(info.links[0][1].link_type == HUVM_LINK_NVLINK_2);
        CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_GET_INFO, &info, 8) == HUVM_NV_ERR_INVALID_PARAM_STRUCT);
        CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_GET_INFO, &info, sizeof(info) - 8) != HUVM_NV_OK);
        memset(&ev, 0, sizeof(ev));
        ev.hdr.abi_version = HUVM_ABI_VERSION;
        ev.hdr.size = sizeof(ev);
        CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_TEST_EVENT, &ev, sizeof(ev)) == HUVM_NV_ERR_NOT_SUPPORTED);
        CHECK(ev.rmStatus == HUVM_NV_ERR_NOT_SUPPORTED);
        CHECK(huvm_sim_ioctl(sim, 42, &info, sizeof(info)) != HUVM_NV_OK);
    }
    huvm_sim_destroy(sim);
    trace_free(&t);
}

static void test_unlimited(void)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_tenant_result_t r;
    huvm_sim_t *sim;
    trace_t t;

    node2(&cfg, 64 * MIB);
    cfg.flags |= HUVM_SIM_FLAG_UNLIMITED;
    sim = huvm_sim_create(&cfg, HUVM_PRESET_STOCK, &err);
    CHECK(sim != NULL);
    trace_stream(&t, 48, 96, 4, 20000);
    spec_from(&s, &t, 0, 3);
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
    CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_OK);
    CHECK(huvm_sim_tenant_result(sim, 0, &r) == HUVM_NV_OK);
    /* Ideal: only cold first touches fault. */
    CHECK(r.faults == 48 && r.first_touches == 48);
    CHECK(r.runtime_ns == r.compute_ns + r.fault_stall_ns);
    CHECK(huvm_sim_check(sim, &err) == 0);
    huvm_sim_destroy(sim);
    trace_free(&t);
}

/* Other paths: NVSwitch ports, PCIe peer-to-peer, remote mapping, slices of run time. */
static void test_paths(uint32_t nvswitch, uint32_t fetch_mode)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_tenant_result_t r;
    HUVM_GET_POLICY_PARAMS get;
    HUVM_SET_POLICY_PARAMS set;
    HUVM_GET_STATS_PARAMS stats;
    huvm_sim_t *sim;
    trace_t t;
    uint32_t a, b, slices = 0;

    huvm_sim_config_defaults(&cfg);
    cfg.gpu_count = 3;
    cfg.flags = nvswitch ? HUVM_SIM_FLAG_NVSWITCH : 0;
    for (a = 0; a < 3; a++) {
        cfg.gpu_memory_bytes[a] = 64 * MIB;
        cfg.pcie_mbyte_per_s[a] = 24000;
        cfg.nvswitch_port_mbyte_per_s[a] = 300000;
        for (b = 0; b < 3; b++) {
            if (a == b)
                continue;
            cfg.link_type[a][b] = nvswitch ? HUVM_LINK_NVLINK_3 : HUVM_LINK_PCIE;
            cfg.link_count[a][b] = nvswitch ? 12 : 0;
            cfg.link_mbyte_per_s[a][b] = nvswitch ? 300000 : 24000;
        }
    }
    sim = huvm_sim_create(&cfg, HUVM_PRESET_HUVM, &err);
    CHECK(sim != NULL);
    if (!sim)
        return;
    trace_stream(&t, 64, 128, 4, 10000);
    spec_from(&s, &t, 0, 2);
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
    memset(&s, 0, sizeof(s));
    s.gpu = 1;
    s.static_bytes = 4 * MIB;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 1);
    s.gpu = 2;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 2);
    memset(&get, 0, sizeof(get));
    get.hdr.abi_version = HUVM_ABI_VERSION;
    get.hdr.size = sizeof(get);
    CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_GET_POLICY, &get, sizeof(get)) == HUVM_NV_OK);
    memset(&set, 0, sizeof(set));
    set.hdr.abi_version = HUVM_ABI_VERSION;
    set.hdr.size = sizeof(set);
    set.policy = get.policy;
    set.policy.generation = 0;
    set.policy.nvlink_only = 0;
    set.policy.fetch_mode = fetch_mode;
    set.policy.gpus[0].role = HUVM_ROLE_HARVESTER;
    CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_SET_POLICY, &set, sizeof(set)) == HUVM_NV_OK);
    /* mid-run too: the copies in flight (each link direction's kind, each GPU's count) hold at every slice */
    while (huvm_sim_run(sim, huvm_sim_now(sim) + 2000000, &err) == HUVM_NV_OK && !huvm_sim_finished(sim)) {
        slices++;
        CHECK(huvm_sim_check(sim, &err) == 0);
    }
    CHECK(huvm_sim_finished(sim) && slices > 1);
    CHECK(huvm_sim_check(sim, &err) == 0);
    CHECK(huvm_sim_tenant_result(sim, 0, &r) == HUVM_NV_OK && r.done);
    memset(&stats, 0, sizeof(stats));
    stats.hdr.abi_version = HUVM_ABI_VERSION;
    stats.hdr.size = sizeof(stats);
    CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_GET_STATS, &stats, sizeof(stats)) == HUVM_NV_OK);
    CHECK(stats.gpus[0].evict_to_peer > 0);
    if (fetch_mode == HUVM_FETCH_REMOTE_MAP && nvswitch)
        CHECK(stats.gpus[0].remote_map > 0 && r.remote_touches > 0);
    else
        CHECK(stats.gpus[0].fetch_from_peer > 0);
    {
        huvm_sim_traffic_t tr;
        huvm_sim_sample_t smp[4];
        uint64_t steps[4];
        uint32_t holder;

        huvm_sim_traffic(sim, &tr);
        CHECK(huvm_sim_samples(sim, smp, 4) <= 4);
        CHECK(huvm_sim_tenant_steps(sim, 0, steps, 4) == 2 && steps[0] < steps[1]);
        CHECK(huvm_sim_chunk_where(sim, 0, 0, &holder) != HUVM_SIM_LOC_NONE);
        CHECK(huvm_sim_chunk_where(sim, 0, 9999, &holder) == HUVM_SIM_LOC_NONE && holder == HUVM_DEST_HOST);
        CHECK(huvm_sim_tenant_result(sim, 7, &r) != HUVM_NV_OK);
    }
    huvm_sim_destroy(sim);
    trace_free(&t);
}

static void get_stats(huvm_sim_t *sim, HUVM_GET_STATS_PARAMS *stats)
{
    memset(stats, 0, sizeof(*stats));
    stats->hdr.abi_version = HUVM_ABI_VERSION;
    stats->hdr.size = sizeof(*stats);
    CHECK(huvm_sim_ioctl(sim, HUVM_IOCTL_GET_STATS, stats, sizeof(*stats)) == HUVM_NV_OK);
}

/* A job that nearly fits its GPU (one chunk to spare) never pre-evicts under huvm: no pressure, so no
 * eviction at all, and it runs exactly as fast as under stock. The prototype's preset pre-evicts below its
 * reserve whatever the pressure (its known cliff). */
static uint64_t run_near_fit(uint32_t preset, HUVM_GET_STATS_PARAMS *stats)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_tenant_result_t r;
    huvm_sim_t *sim;
    trace_t t;

    node2(&cfg, 64 * MIB);                  /* 32 chunks; the 1/16 bound keeps a reserve of 2 */
    sim = huvm_sim_create(&cfg, preset, &err);
    CHECK(sim != NULL);
    if (!sim)
        return 0;
    trace_stream(&t, 31, 62 * 4, 4, 20000);
    spec_from(&s, &t, 0, 1);
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
    CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_OK);
    CHECK(huvm_sim_check(sim, &err) == 0);
    CHECK(huvm_sim_tenant_result(sim, 0, &r) == HUVM_NV_OK && r.done);
    get_stats(sim, stats);
    huvm_sim_destroy(sim);
    trace_free(&t);
    return r.runtime_ns;
}

static void test_near_fit(void)
{
    HUVM_GET_STATS_PARAMS st_stock, st_huvm, st_atc;
    uint64_t stock = run_near_fit(HUVM_PRESET_STOCK, &st_stock);
    uint64_t huvm = run_near_fit(HUVM_PRESET_HUVM, &st_huvm);
    uint64_t atc = run_near_fit(HUVM_PRESET_ATC22, &st_atc);

    CHECK(st_stock.gpus[0].evict_to_host == 0);
    CHECK(st_huvm.gpus[0].evict_to_host + st_huvm.gpus[0].evict_to_peer == 0);
    CHECK(huvm == stock);
    CHECK(st_atc.gpus[0].preevict_to_host + st_atc.gpus[0].preevict_to_peer > 0);
    CHECK(atc > stock);
}

/* A lender's own data never leaves it while it holds guests' chunks, pre-eviction included: GPU 1 holds
 * GPU 0's chunks when its own (managed) job starts and grows; its pre-evictions and evictions give guests
 * back first. Both peer-tier presets. */
static void test_lender_keeps_own(uint32_t preset)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    HUVM_GET_STATS_PARAMS stats;
    huvm_sim_t *sim;
    trace_t t, lt;

    node2(&cfg, 64 * MIB);
    sim = huvm_sim_create(&cfg, preset, &err);
    CHECK(sim != NULL);
    if (!sim)
        return;
    CHECK(sim->core.single_writer == 1);
    if (g_atomic_counters)
        sim->core.single_writer = 0;
    trace_stream(&t, 64, 128, 4, 20000);    /* 2x GPU 0: its overflow fills GPU 1 */
    spec_from(&s, &t, 0, 6);
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
    trace_stream(&lt, 28, 400, 2, 20000);   /* the lender's own job: 28 of its 32 chunks */
    spec_from(&s, &lt, 1, 0);
    s.start_ns = 2000000;                   /* after GPU 0 has lent some of GPU 1's memory */
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 1);
    set_roles(sim, HUVM_ROLE_HARVESTER, HUVM_ROLE_LENDER);
    CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_OK);
    CHECK(huvm_sim_check(sim, &err) == 0);
    get_stats(sim, &stats);
    CHECK(stats.gpus[0].evict_to_peer > 0);
    CHECK(stats.gpus[1].giveback > 0);      /* it did reclaim its memory from guests */
    CHECK(stats.gpus[1].evict_to_host == 0);        /* and never evicted its own data for them */
    CHECK(stats.gpus[1].preevict_to_host == 0);
    if (stats.gpus[1].evict_to_host)
        fprintf(stderr,
                "preset %u: lender evicted %llu own chunks (%llu pre-evicted), gave back %llu\n",
                preset,
                (unsigned long long)stats.gpus[1].evict_to_host,
                (unsigned long long)stats.gpus[1].preevict_to_host,
                (unsigned long long)stats.gpus[1].giveback);
    huvm_sim_destroy(sim);
    trace_free(&t);
    trace_free(&lt);
}

/* Run one tenant per trace (tenant i on GPU i, all foreground) on cfg; results in r[]. */
static void run_cfg(const huvm_sim_config_t *cfg,
                    uint32_t preset,
                    trace_t *const *t,
                    uint32_t n,
                    huvm_sim_tenant_result_t *r,
                    HUVM_GET_STATS_PARAMS *stats)
{
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_t *sim = huvm_sim_create(cfg, preset, &err);
    uint32_t i;

    CHECK(sim != NULL);
    if (!sim)
        return;
    for (i = 0; i < n; i++) {
        spec_from(&s, t[i], i, 1);
        CHECK(huvm_sim_add_tenant(sim, &s, &err) == (int32_t)i);
    }
    if (n == 2 && preset != HUVM_PRESET_STOCK)
        set_roles(sim, HUVM_ROLE_HARVESTER, HUVM_ROLE_LENDER);
    CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_OK);
    CHECK(huvm_sim_check(sim, &err) == 0);
    for (i = 0; i < n; i++)
        CHECK(huvm_sim_tenant_result(sim, i, &r[i]) == HUVM_NV_OK && r[i].done);
    if (stats)
        get_stats(sim, stats);
    huvm_sim_destroy(sim);
}

/* In-flight copies hold memory: a job that only populates new chunks on a full GPU (no host -> GPU copy per
 * fault) cannot outrun the GPU -> host copies that make its room, pre-eviction or not. */
static void test_inflight_holds_memory(void)
{
    huvm_sim_config_t cfg;
    huvm_sim_tenant_result_t r[1];
    HUVM_GET_STATS_PARAMS st;
    trace_t t, *tp = &t;
    uint64_t evicted, copy_ns = (2 * MIB * 1000 + 11999) / 12000;

    node2(&cfg, 64 * MIB);                  /* 32 chunks */
    cfg.gpu_count = 1;
    trace_stream(&t, 512, 64, 8, 1000);     /* 512 chunks, each touched once */
    run_cfg(&cfg, HUVM_PRESET_ATC22, &tp, 1, r, &st);
    evicted = st.gpus[0].evict_to_host;
    CHECK(st.gpus[0].preevict_to_host > 0);
    CHECK(evicted >= 512 - 32);
    CHECK(r[0].runtime_ns >= (evicted - 32) * copy_ns);
    trace_free(&t);
}

/* A link shares its bandwidth between demand and background work as processor sharing: both at half the rate
 * until the shorter is done, so the two end no earlier than their work together (work conserving). A formula
 * that charged the longer transfer only half the overlap let a link move 1.2x its bandwidth here. */
static void test_link_sharing(void)
{
    huvm_sim_t *sim = calloc(1, sizeof(*sim));
    sim_res_t r;
    uint64_t bg, fg;

    CHECK(sim != NULL);
    if (!sim)
        return;
    memset(&r, 0, sizeof(r));
    res_set(&r, 1000, 0); /* 1000 bytes a microsecond */
    bg = res_xfer(sim, &r, 0, 100000, 0, SIM_BG); /* 100 us of background work, then 200 us of demand work */
    fg = res_xfer(sim, &r, 0, 200000, 0, SIM_FG);
    CHECK(bg == 100000 && fg == 300000 && r.busy_until[SIM_BG] == 200000);
    CHECK(u64_max(fg, r.busy_until[SIM_BG]) >= 300000);
    memset(&r, 0, sizeof(r));
    res_set(&r, 1000, 0);
    bg = res_xfer(sim, &r, 0, 100000, 0, SIM_BG); /* a short demand transfer: both at half rate meanwhile */
    fg = res_xfer(sim, &r, 0, 40000, 0, SIM_FG);
    CHECK(fg == 80000 && r.busy_until[SIM_BG] == 140000);
    free(sim);
}

/* A PCIe switch arbitrates its uplink between its ports (round robin), not by whole transfers in arrival
 * order: a GPU's copy that arrives while the other GPU has eight demand copies queued on the uplink shares it
 * at half the rate instead of waiting for all eight; the eight still end no earlier than the nine copies'
 * work together. */
static void test_uplink_ports(void)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_t *sim;
    uint64_t chunk_ns = (2 * MIB * 1000 + 11999) / 12000, end0 = 0, end1;
    uint32_t k;

    node2(&cfg, 64 * MIB);
    cfg.pcie_switch[0] = cfg.pcie_switch[1] = 1;
    cfg.pcie_switch_mbyte_per_s[0] = 12000;
    cfg.pcie_mbyte_per_s[0] = cfg.pcie_mbyte_per_s[1] = 48000; /* the uplink is the narrow part */
    sim = huvm_sim_create(&cfg, HUVM_PRESET_STOCK, &err);
    CHECK(sim != NULL);
    if (!sim)
        return;
    for (k = 0; k < 8; k++)
        end0 = sim_xfer_h2d(sim, 0, 0, 2 * MIB, 0, SIM_FG, SIM_NIL);
    end1 = sim_xfer_h2d(sim, 1, 0, 2 * MIB, 0, SIM_FG, SIM_NIL);
    CHECK(end1 <= 2 * chunk_ns + cfg.pcie_latency_ns);
    CHECK(u64_max(end0, sim->sw_h2d[0].busy_until[SIM_FG]) >= 9 * chunk_ns);
    huvm_sim_destroy(sim);
}

/* GPUs behind one PCIe switch share its uplink. Where the copies bound the jobs (the defaults' small block
 * service), an uplink slower than the two links together bounds them from below: it cannot move both GPUs'
 * host -> GPU bytes faster than its rate. Where the per-GPU block service bounds them, sharing costs each job
 * at most the other's time on the uplink (FIFO: it waits behind the other GPU's copies, not behind its
 * services); a simulator that ran each tenant's op to its end before the other's (the copies of a whole op
 * reserved ahead) made them take turns and ran each about twice as long. The peer path is not the uplink. */
static void test_pcie_switch(void)
{
    huvm_sim_config_t cfg;
    huvm_sim_tenant_result_t own[2], shared[2];
    HUVM_GET_STATS_PARAMS st;
    trace_t a, b, *tp[2] = { &a, &b };
    uint64_t h2d_ns, both_ns;
    uint32_t i;

    node2(&cfg, 64 * MIB);
    trace_stream(&a, 64, 256, 4, 10000);    /* 2x each GPU */
    trace_stream(&b, 64, 256, 4, 10000);
    run_cfg(&cfg, HUVM_PRESET_STOCK, tp, 2, own, NULL);
    cfg.pcie_switch[0] = cfg.pcie_switch[1] = 3;
    cfg.pcie_switch_mbyte_per_s[2] = 6000;  /* half the two links */
    run_cfg(&cfg, HUVM_PRESET_STOCK, tp, 2, shared, &st);
    h2d_ns = (st.gpus[0].fetch_from_host + st.gpus[1].fetch_from_host) * 2 * MIB * 1000 / 6000;
    CHECK(own[0].runtime_ns < h2d_ns && own[1].runtime_ns < h2d_ns); /* the links alone are faster */
    CHECK(u64_max(shared[0].runtime_ns, shared[1].runtime_ns) >= h2d_ns);
    cfg.pcie_switch[1] = 4;                 /* separate switches, each as fast as a GPU's link: no cost */
    cfg.pcie_switch_mbyte_per_s[2] = cfg.pcie_switch_mbyte_per_s[3] = 12000;
    run_cfg(&cfg, HUVM_PRESET_STOCK, tp, 2, shared, NULL);
    CHECK(shared[0].runtime_ns == own[0].runtime_ns);

    cfg.fault_service_ns = 1000000;         /* service-bound (an assumption of this test, 4x the H200's) */
    cfg.pcie_switch[0] = cfg.pcie_switch[1] = 0;
    run_cfg(&cfg, HUVM_PRESET_STOCK, tp, 2, own, &st);
    cfg.pcie_switch[0] = cfg.pcie_switch[1] = 3;
    run_cfg(&cfg, HUVM_PRESET_STOCK, tp, 2, shared, NULL);
    for (i = 0; i < 2; i++) {
        /* the other GPU's copies over the uplink, both directions (a 2 MiB copy at 12 GB/s) */
        both_ns = (st.gpus[1 - i].fetch_from_host + st.gpus[1 - i].evict_to_host) * (2 * MIB * 1000 / 12000);
        CHECK(shared[i].runtime_ns > own[i].runtime_ns);
        CHECK(shared[i].runtime_ns <= own[i].runtime_ns + both_ns);
        if (shared[i].runtime_ns > own[i].runtime_ns + both_ns)
            fprintf(stderr,
                    "GPU %u behind a shared switch: %llu ns, alone %llu ns, the other's copies %llu ns\n",
                    i,
                    (unsigned long long)shared[i].runtime_ns,
                    (unsigned long long)own[i].runtime_ns,
                    (unsigned long long)both_ns);
    }
    trace_free(&a);
    trace_free(&b);
}

/* Lending costs the lender: guests' chunks copied into and out of its memory take lend_chunk_ns each from
 * its running job; a fault on peer-held data costs peer_fault_service_ns. */
static void test_lend_and_peer_fault_costs(void)
{
    huvm_sim_config_t cfg;
    huvm_sim_tenant_result_t r0[2], r1[2];
    HUVM_GET_STATS_PARAMS st;
    trace_t h, l, *tp[2] = { &h, &l };

    node2(&cfg, 64 * MIB);
    trace_stream(&h, 48, 192, 4, 20000);    /* 1.5x GPU 0: the overflow goes to GPU 1 and back */
    trace_stream(&l, 8, 400, 2, 20000);     /* the lender's own small job runs meanwhile */
    cfg.lend_chunk_ns = 0;
    cfg.peer_fault_service_ns = cfg.fault_service_ns;
    run_cfg(&cfg, HUVM_PRESET_ATC22, tp, 2, r0, &st);
    CHECK(st.gpus[0].evict_to_peer > 0 && st.gpus[0].fetch_from_peer > 0);
    CHECK(r0[1].lend_stall_ns == 0);
    cfg.lend_chunk_ns = 20000;
    run_cfg(&cfg, HUVM_PRESET_ATC22, tp, 2, r1, NULL);
    CHECK(r1[1].lend_stall_ns > 0);
    CHECK(r1[1].runtime_ns == r0[1].runtime_ns + r1[1].lend_stall_ns);
    CHECK(r1[0].lend_stall_ns == 0);        /* the harvester lends nothing */
    cfg.lend_chunk_ns = 0;
    cfg.peer_fault_service_ns = cfg.fault_service_ns + 100000;
    run_cfg(&cfg, HUVM_PRESET_ATC22, tp, 2, r1, NULL);
    CHECK(r1[0].runtime_ns > r0[0].runtime_ns + 100000);    /* (fetches prefetched back pay no fault) */
    run_cfg(&cfg, HUVM_PRESET_STOCK, tp, 2, r1, &st);      /* no peer data under stock: no change */
    CHECK(st.gpus[0].evict_to_peer == 0);
    cfg.peer_fault_service_ns = cfg.fault_service_ns;
    run_cfg(&cfg, HUVM_PRESET_STOCK, tp, 2, r0, NULL);
    CHECK(r1[0].runtime_ns == r0[0].runtime_ns);
    trace_free(&h);
    trace_free(&l);
}

/* Collectives: an op's op_link_bytes go over the pair's link (the op waits for them beyond its compute),
 * count apart from migrations, and a bad peer mask is refused with its field; record_ops keeps op ends. */
static void test_collectives(void)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_tenant_result_t r;
    huvm_sim_traffic_t tr;
    huvm_sim_t *sim;
    uint64_t link[4] = { 0, 50000000, 0, 50000000 }, ends[8];
    trace_t t;
    uint32_t k;

    node2(&cfg, 64 * MIB);
    trace_stream(&t, 4, 4, 1, 100000);      /* 0.1 ms of compute an op; 50 MB over 50 GB/s is 1 ms */
    sim = huvm_sim_create(&cfg, HUVM_PRESET_STOCK, &err);
    CHECK(sim != NULL);
    spec_from(&s, &t, 0, 2);
    s.op_link_bytes = link;
    s.link_send_mask = 1u << 0;             /* its own GPU */
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == -1 && strcmp(err.field, "tenants[0].link_send_mask") == 0);
    s.link_send_mask = 0;
    s.link_recv_mask = 1u << 2;             /* no GPU 2 */
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == -1 && strcmp(err.field, "tenants[0].link_recv_mask") == 0);
    s.link_recv_mask = 0;
    s.link_send_mask = 1u << 1;
    s.op_link_bytes = NULL;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == -1 && strcmp(err.field, "tenants[0].op_link_bytes") == 0);
    s.op_link_bytes = link;
    s.record_ops = 2;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == -1 && strcmp(err.field, "tenants[0].record_ops") == 0);
    s.record_ops = 1;
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
    link[1] = 0;                            /* the simulator keeps its own copy */
    CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_OK);
    CHECK(huvm_sim_tenant_result(sim, 0, &r) == HUVM_NV_OK);
    /* 4 ops with 1 ms of copies a step, 2 steps: 8 ms at least, 7.2 ms of it waiting on the link */
    CHECK(r.link_stall_ns >= 4 * (1000000 - 100000) && r.runtime_ns >= 4 * 1000000);
    huvm_sim_traffic(sim, &tr);
    CHECK(tr.collective[0][1] == 4 * 50000000ull && tr.collective[1][0] == 0 && tr.gpu_to_gpu[0][1] == 0);
    CHECK(huvm_sim_tenant_ops(sim, 0, ends, 8) == 8);
    for (k = 1; k < 8; k++)
        CHECK(ends[k] > ends[k - 1]);
    CHECK(ends[7] == r.end_ns);
    CHECK(ends[1] - ends[0] >= 1000000 && ends[2] - ends[1] < 1000000);    /* ops 1 and 3 carry the bytes */
    huvm_sim_destroy(sim);
    trace_free(&t);
}

/* Partial-block touches (touch_pages) through every path: a harvester streaming over 1.5x its GPU, each touch
 * naming 1 to 4 groups of its block, under stock, huvm-atc22 and huvm (peer evictions, fetch-backs, prefetch),
 * host-resident and not. The node stays consistent and moves whole 64 KiB groups only, and less than the
 * same run with whole blocks. */
static void test_partial_pages(uint32_t preset, uint32_t host_resident)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_traffic_t tr[2];
    trace_t t;
    uint32_t *pages, i, pass;

    trace_stream(&t, 48, 96, 4, 20000);
    pages = malloc(t.n_touches * sizeof(uint32_t));
    for (i = 0; i < t.n_touches; i++)
        pages[i] = 0xfu << (i * 7 % 29);
    for (pass = 0; pass < 2; pass++) {
        huvm_sim_t *sim;
        uint32_t g;

        node2(&cfg, 64 * MIB);
        sim = huvm_sim_create(&cfg, preset, &err);
        CHECK(sim != NULL);
        if (!sim)
            break;
        spec_from(&s, &t, 0, 3);
        s.host_resident = host_resident;
        s.touch_pages = pass ? pages : NULL;
        CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
        memset(&s, 0, sizeof(s));
        s.gpu = 1;
        s.static_bytes = 8 * MIB;
        CHECK(huvm_sim_add_tenant(sim, &s, &err) == 1);
        if (preset != HUVM_PRESET_STOCK)
            set_roles(sim, HUVM_ROLE_HARVESTER, HUVM_ROLE_LENDER);
        CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_OK);
        CHECK(huvm_sim_finished(sim));
        CHECK(huvm_sim_check(sim, &err) == 0);
        huvm_sim_traffic(sim, &tr[pass]);
        for (g = 0; g < 2; g++)
            CHECK(tr[pass].host_to_gpu[g] % 65536 == 0 && tr[pass].gpu_to_host[g] % 65536 == 0);
        huvm_sim_destroy(sim);
    }
    CHECK(tr[1].host_to_gpu[0] + tr[1].gpu_to_host[0] + tr[1].gpu_to_gpu[0][1] + tr[1].gpu_to_gpu[1][0] <
          tr[0].host_to_gpu[0] + tr[0].gpu_to_host[0] + tr[0].gpu_to_gpu[0][1] + tr[0].gpu_to_gpu[1][0]);
    free(pages);
    trace_free(&t);
}

/* UVM's thrashing detection in the running model (huvm_sim_thrash.h). (a) An oversubscribed stream, every
 * policy: each block is an event target again and again; under stock only ever towards its GPU (evictions are
 * no events), so none is tracked; no fault is throttled under any policy. (b) A block seeded as thrashing between the CPU and
 * the GPU, the CPU the processor not throttled in the current period: the GPU's first fault on it waits for
 * the nap's end (500 us from the CPU's hint) and is then serviced. */
static void run_stream(uint32_t preset,
                       int seed,
                       huvm_sim_tenant_result_t *r,
                       uint64_t *throttled,
                       uint32_t *tracked,
                       uint32_t *with_events)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_t *sim;
    trace_t t;
    uint32_t i;

    node2(&cfg, 64 * MIB);
    sim = huvm_sim_create(&cfg, preset, &err);
    CHECK(sim != NULL);
    trace_stream(&t, 48, 96, 4, 20000);
    spec_from(&s, &t, 0, 3);
    CHECK(huvm_sim_add_tenant(sim, &s, &err) == 0);
    if (seed) {
        for (i = 1; i <= 5; i++)
            CHECK(huvm_sim_thr_migrated(&sim->thr, 0, (i & 1) ? HUVM_SIM_THR_CPU : 0, i) == 0);
        CHECK(huvm_sim_thr_events(&sim->thr, 0) == 3);
        CHECK(huvm_sim_thr_hint(&sim->thr, 0, HUVM_SIM_THR_CPU, 6).type == HUVM_SIM_THR_HINT_NONE);
    }
    CHECK(huvm_sim_run(sim, HUVM_UNLIMITED, &err) == HUVM_NV_OK);
    CHECK(huvm_sim_tenant_result(sim, 0, r) == HUVM_NV_OK && r->done);
    *throttled = sim->thr.throttled;
    *tracked = sim->thr.pool_n;
    *with_events = 0;
    for (i = 0; i < sim->thr.n_blocks; i++)
        *with_events += sim->thr.gate[i].last_ts != 0;
    CHECK(huvm_sim_check(sim, &err) == 0);
    huvm_sim_destroy(sim);
    trace_free(&t);
}

static void test_thrashing(void)
{
    static const uint32_t presets[] = { HUVM_PRESET_STOCK, HUVM_PRESET_ATC22, HUVM_PRESET_HUVM };
    huvm_sim_tenant_result_t plain, seeded;
    uint64_t throttled;
    uint32_t tracked, with_events, k;

    for (k = 0; k < 3; k++) {
        run_stream(presets[k], 0, &plain, &throttled, &tracked, &with_events);
        CHECK(plain.faults > 48); /* oversubscribed: blocks come back after eviction */
        CHECK(with_events == 48);
        /* stock: one processor, never tracked; huvm's prefetch to the peer is an event towards another
         * processor, so a block may be tracked, but none thrashes on this trace */
        CHECK(presets[k] != HUVM_PRESET_STOCK || tracked == 0);
        CHECK(throttled == 0);
    }
    run_stream(HUVM_PRESET_STOCK, 0, &plain, &throttled, &tracked, &with_events);
    run_stream(HUVM_PRESET_STOCK, 1, &seeded, &throttled, &tracked, &with_events);
    CHECK(throttled == 1);
    /* the first fault came well inside the nap: it waited for most of it */
    CHECK(seeded.fault_stall_ns > plain.fault_stall_ns + 400000);
    CHECK(seeded.fault_stall_ns <= plain.fault_stall_ns + 500000);
    CHECK(seeded.faults == plain.faults);
}

/* A pre-eviction batch in runs (huvm_decide_evict_run; the owner's notes deferred) against a decision and a
 * refresh per chunk (per_chunk_evict): two GPUs that each harvest from and lend to the other, both over their
 * memory, in slices; after every slice both simulations have the same peak history of every GPU (what the
 * deferred notes must reproduce), and at the end the same results, counters and traffic. */
static void test_evict_runs_match_per_chunk(void)
{
    huvm_sim_config_t cfg;
    huvm_sim_error_t err;
    huvm_sim_tenant_spec_t s;
    huvm_sim_t *sim[2];
    trace_t t0, t1;
    uint32_t k, g, slices = 0, differ = 0;

    node2(&cfg, 256 * MIB);
    trace_stream(&t0, 200, 400, 8, 10000);
    trace_stream(&t1, 60, 300, 3, 13000);
    for (k = 0; k < 2; k++) {
        sim[k] = huvm_sim_create(&cfg, HUVM_PRESET_HUVM, &err);
        CHECK(sim[k] != NULL);
        if (!sim[k])
            return;
        sim[k]->per_chunk_evict = k;
        spec_from(&s, &t0, 0, 2);
        CHECK(huvm_sim_add_tenant(sim[k], &s, &err) == 0);
        spec_from(&s, &t1, 1, 2);
        CHECK(huvm_sim_add_tenant(sim[k], &s, &err) == 1);
        set_roles(sim[k], HUVM_ROLE_BOTH, HUVM_ROLE_BOTH);
    }
    while (!huvm_sim_finished(sim[0]) && slices < 100000) {
        uint64_t until = huvm_sim_now(sim[0]) + 50000;

        CHECK(huvm_sim_run(sim[0], until, &err) == HUVM_NV_OK);
        CHECK(huvm_sim_run(sim[1], until, &err) == HUVM_NV_OK);
        for (g = 0; g < 2; g++)
            differ += memcmp(&sim[0]->gpus[g].own_peak, &sim[1]->gpus[g].own_peak, sizeof(huvm_peak_t)) != 0;
        CHECK(huvm_sim_check(sim[0], &err) == 0); /* the copies in flight over NVLink, mid-run */
        slices++;
    }
    CHECK(differ == 0);
    CHECK(slices > 10 && huvm_sim_finished(sim[0]) && huvm_sim_finished(sim[1]));
    CHECK(huvm_sim_now(sim[0]) == huvm_sim_now(sim[1]));
    CHECK(memcmp(&sim[0]->traffic, &sim[1]->traffic, sizeof(sim[0]->traffic)) == 0);
    CHECK(memcmp(sim[0]->core.counters, sim[1]->core.counters, sizeof(sim[0]->core.counters)) == 0);
    CHECK(sim[0]->core.counters[0].preevict_to_peer > 100);     /* the runs were taken */
    printf("evict runs: %u slices, %llu chunks pre-evicted to the peer\n",
           slices,
           (unsigned long long)sim[0]->core.counters[0].preevict_to_peer);
    for (k = 0; k < 2; k++)
        huvm_sim_destroy(sim[k]);
    trace_free(&t0);
    trace_free(&t1);
}

int main(void)
{
    test_evict_runs_match_per_chunk();
    test_paths(1, HUVM_FETCH_REMOTE_MAP);
    test_paths(1, HUVM_FETCH_MIGRATE);
    test_paths(0, HUVM_FETCH_MIGRATE);
    test_bad_input();
    test_unlimited();
    test_policies();
    test_near_fit();
    test_lender_keeps_own(HUVM_PRESET_HUVM);
    test_lender_keeps_own(HUVM_PRESET_ATC22);
    test_inflight_holds_memory();
    test_link_sharing();
    test_uplink_ports();
    test_pcie_switch();
    test_lend_and_peer_fault_costs();
    test_collectives();
    test_partial_pages(HUVM_PRESET_STOCK, 1);
    test_partial_pages(HUVM_PRESET_ATC22, 0);
    test_partial_pages(HUVM_PRESET_HUVM, 0);
    test_partial_pages(HUVM_PRESET_HUVM, 1);
    test_thrashing();
    if (failures) {
        fprintf(stderr, "sim_test: %d check(s) failed\n", failures);
        return 1;
    }
    printf("sim_test: all checks passed\n");
    return 0;
}
