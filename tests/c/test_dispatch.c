/*
 * huvm: tests of the control dispatch (huvm_dispatch.c): header checks, permissions, every command, and
 * every class of bad input (refused with a precise status, state unchanged). SPDX-License-Identifier: MIT
 */
#include "huvm_test.h"

static huvm_core_t core;
static huvm_core_t saved;
static const huvm_caller_t root = { .privileged = 1, .allow_test = 1, .uid = 0, .pid = 1, .now_ns = 5000 };
static const huvm_caller_t user = { .privileged = 0, .allow_test = 0, .uid = 1000, .pid = 2, .now_ns = 5000 };
static const huvm_caller_t user_test = { .privileged = 0, .allow_test = 1, .uid = 1000, .pid = 2,
                                          .now_ns = 5000 };

#define HDR(p) do { memset(&(p), 0, sizeof(p)); (p).hdr.abi_version = HUVM_ABI_VERSION; \
                    (p).hdr.size = sizeof(p); } while (0)
#define RUN(caller, cmd, p) huvm_dispatch(&core, NULL, NULL, (caller), (cmd), &(p), sizeof(p))

static void save(void)
{
    memcpy(&saved, &core, sizeof(core));
}

static int unchanged(void)
{
    return memcmp(&saved, &core, sizeof(core)) == 0;
}

/* A synthetic node through TEST_SET_NODE: n GPUs of mem bytes, all NVLink 3 pairs. */
static huvm_status_t set_node(uint32_t n, uint64_t mem)
{
    static HUVM_TEST_SET_NODE_PARAMS p;
    uint32_t i, j;

    huvm_core_init(&core, HUVM_BACKEND_CORE, HUVM_PRESET_HUVM);
    HDR(p);
    p.gpu_count = n;
    for (i = 0; i < n; i++) {
        fx_uuid(p.gpus[i].uuid, i);
        snprintf(p.gpus[i].name, sizeof(p.gpus[i].name), "t%u", i);
        p.gpus[i].memory_bytes = mem;
        p.gpus[i].free_bytes = mem;
        p.gpus[i].pcie_mbyte_per_s = 16000;
        p.gpus[i].flags = HUVM_GPU_FLAG_PRESENT;
        for (j = 0; j < n; j++) {
            if (i != j) {
                p.links[i][j].link_type = HUVM_LINK_NVLINK_3;
                p.links[i][j].link_count = 2;
                p.links[i][j].mbyte_per_s = 50000;
            }
        }
    }
    return RUN(&root, HUVM_IOCTL_TEST_SET_NODE, p);
}

static HUVM_TEST_EVENT_PARAMS event(uint32_t ev, uint32_t gpu, uint32_t count)
{
    HUVM_TEST_EVENT_PARAMS p;

    HDR(p);
    p.event = ev;
    p.gpu = gpu;
    p.count = count;
    p.va = 0x7f0000000000ULL;
    return p;
}

TEST(dispatch_sizes)
{
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_GET_INFO), sizeof(HUVM_GET_INFO_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_GET_POLICY), sizeof(HUVM_GET_POLICY_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_SET_POLICY), sizeof(HUVM_SET_POLICY_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_GET_STATS), sizeof(HUVM_GET_STATS_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_RESET_STATS), sizeof(HUVM_RESET_STATS_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_LIST_VA_SPACES), sizeof(HUVM_LIST_VA_SPACES_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_TEST_SET_NODE), sizeof(HUVM_TEST_SET_NODE_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_TEST_EVENT), sizeof(HUVM_TEST_EVENT_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_SET_GPU_RATES), sizeof(HUVM_SET_GPU_RATES_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_GET_GPU_RATES), sizeof(HUVM_GET_GPU_RATES_PARAMS));
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_FIRST - 1), 0);
    CHECK_EQ(huvm_cmd_params_size(HUVM_IOCTL_LAST + 1), 0);
    CHECK_EQ(huvm_cmd_params_size(0), 0);
}

TEST(dispatch_check_hdr)
{
    huvm_hdr_t h = { HUVM_ABI_VERSION, sizeof(HUVM_RESET_STATS_PARAMS), 0, 0 };
    uint32_t ef = 77;
    const uint32_t sz = sizeof(HUVM_RESET_STATS_PARAMS);

    CHECK_EQ(huvm_check_hdr(HUVM_IOCTL_RESET_STATS, &h, sz, &ef), HUVM_NV_OK);
    CHECK_EQ(ef, HUVM_FIELD_NONE);
    CHECK_EQ(h.module_abi_version, HUVM_ABI_VERSION);
    h.abi_version = ((HUVM_ABI_VERSION_MAJOR + 1) << 16);
    h.module_abi_version = 0;
    CHECK_EQ(huvm_check_hdr(HUVM_IOCTL_RESET_STATS, &h, sz, &ef), HUVM_NV_ERR_NOT_COMPATIBLE);
    CHECK_EQ(ef, HUVM_FIELD_HDR_ABI_VERSION);
    CHECK_EQ(h.module_abi_version, HUVM_ABI_VERSION);       /* written even on refusal */
    h.abi_version = HUVM_ABI_VERSION + 5;                   /* a newer minor talks */
    CHECK_EQ(huvm_check_hdr(HUVM_IOCTL_RESET_STATS, &h, sz, &ef), HUVM_NV_OK);
    h.size = sz - 8;
    CHECK_EQ(huvm_check_hdr(HUVM_IOCTL_RESET_STATS, &h, sz, &ef), HUVM_NV_ERR_INVALID_PARAM_STRUCT);
    CHECK_EQ(ef, HUVM_FIELD_HDR_SIZE);
    h.size = sz;
    CHECK_EQ(huvm_check_hdr(HUVM_IOCTL_RESET_STATS, &h, sz + 8, &ef), HUVM_NV_ERR_INVALID_PARAM_STRUCT);
    h.flags = 1;
    CHECK_EQ(huvm_check_hdr(HUVM_IOCTL_RESET_STATS, &h, sz, &ef), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(ef, HUVM_FIELD_HDR_FLAGS);
    h.flags = 0;
    CHECK_EQ(huvm_check_hdr(1234, &h, sz, &ef), HUVM_NV_ERR_INVALID_COMMAND);
    CHECK_EQ(huvm_check_hdr(HUVM_IOCTL_RESET_STATS, NULL, sz, &ef), HUVM_NV_ERR_INVALID_PARAM_STRUCT);
}

TEST(dispatch_bad_header_leaves_state)
{
    static HUVM_SET_POLICY_PARAMS p;
    uint8_t small[12] = { 0 };

    CHECK_EQ(set_node(4, 16 * GIB), HUVM_NV_OK);
    save();
    HDR(p);
    p.policy = core.policy;
    p.policy.peer_select = HUVM_PEER_SELECT_ROUND_ROBIN;
    p.hdr.abi_version = (HUVM_ABI_VERSION_MAJOR + 1) << 16;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, p), HUVM_NV_ERR_NOT_COMPATIBLE);
    CHECK_EQ(p.error_field, HUVM_FIELD_HDR_ABI_VERSION);
    CHECK_EQ(p.rmStatus, HUVM_NV_ERR_NOT_COMPATIBLE);
    CHECK(unchanged());
    p.hdr.abi_version = HUVM_ABI_VERSION;
    p.hdr.size = 100;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, p), HUVM_NV_ERR_INVALID_PARAM_STRUCT);
    CHECK_EQ(p.error_field, HUVM_FIELD_HDR_SIZE);
    CHECK(unchanged());
    /* a short buffer: refused, nothing written beyond it */
    p.hdr.size = sizeof(p);
    CHECK_EQ(huvm_dispatch(&core, NULL, NULL, &root, HUVM_IOCTL_SET_POLICY, &p, 100),
             HUVM_NV_ERR_INVALID_PARAM_STRUCT);
    CHECK_EQ(huvm_dispatch(&core, NULL, NULL, &root, HUVM_IOCTL_SET_POLICY, small, sizeof(small)),
             HUVM_NV_ERR_INVALID_PARAM_STRUCT);
    CHECK_EQ(huvm_dispatch(&core, NULL, NULL, &root, 999, small, sizeof(small)), HUVM_NV_ERR_INVALID_COMMAND);
    CHECK_EQ(huvm_dispatch(&core, NULL, NULL, &root, HUVM_IOCTL_SET_POLICY, NULL, sizeof(p)),
             HUVM_NV_ERR_INVALID_PARAM_STRUCT);
    p.hdr.flags = 4;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, p), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(p.error_field, HUVM_FIELD_HDR_FLAGS);
    CHECK(unchanged());
}

TEST(dispatch_get_info)
{
    static HUVM_GET_INFO_PARAMS p;

    CHECK_EQ(set_node(3, 16 * GIB), HUVM_NV_OK);
    HDR(p);
    memset(p.gpus, 0xee, sizeof(p.gpus));
    CHECK_EQ(RUN(&user, HUVM_IOCTL_GET_INFO, p), HUVM_NV_OK);  /* anyone */
    CHECK_EQ(p.rmStatus, HUVM_NV_OK);
    CHECK_EQ(p.hdr.module_abi_version, HUVM_ABI_VERSION);
    CHECK_EQ(p.huvm_version, HUVM_VERSION);
    CHECK_EQ(p.gpu_count, 3);
    CHECK_EQ(p.max_gpus, HUVM_MAX_GPUS);
    CHECK(strcmp(p.upstream_version, "535.261.03") == 0);
    CHECK(strcmp(p.gpus[1].name, "t1") == 0);
    CHECK_EQ(p.gpus[2].memory_bytes, 16 * GIB);
    CHECK_EQ(p.gpus[3].memory_bytes, 0);                    /* cleared, no stale input */
    CHECK_EQ(p.links[0][2].link_type, HUVM_LINK_NVLINK_3);
    CHECK_EQ(p.links[1][1].link_type, HUVM_LINK_NONE);
}

TEST(dispatch_policy_get_set_and_permissions)
{
    static HUVM_GET_POLICY_PARAMS g;
    static HUVM_SET_POLICY_PARAMS s;

    CHECK_EQ(set_node(4, 16 * GIB), HUVM_NV_OK);
    HDR(g);
    CHECK_EQ(RUN(&user, HUVM_IOCTL_GET_POLICY, g), HUVM_NV_OK);
    CHECK_EQ(g.policy.gpu_count, 4);
    CHECK(memcmp(&g.policy, &core.policy, sizeof(g.policy)) == 0);

    HDR(s);
    s.policy = g.policy;
    s.policy.hysteresis_ms = 20;                            /* the huvm preset has 10 */
    save();
    CHECK_EQ(RUN(&user, HUVM_IOCTL_SET_POLICY, s), HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS);
    CHECK_EQ(s.rmStatus, HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS);
    CHECK(unchanged());
    huvm_test_trace_reset();
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, s), HUVM_NV_OK);
    CHECK_EQ(s.policy.generation, g.policy.generation + 1);
    CHECK_EQ(core.policy.hysteresis_ms, 20);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_CUSTOM);
    CHECK_EQ(huvm_test_trace_count("policy"), 1);
    /* stale generation */
    s.policy.generation = g.policy.generation;
    save();
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, s), HUVM_NV_ERR_STATE_IN_USE);
    CHECK_EQ(s.error_field, HUVM_FIELD_GENERATION);
    CHECK(unchanged());
    /* out of range, field named */
    s.policy.generation = 0;
    s.policy.prefetch_stride = 99;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, s), HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(s.error_field, HUVM_FIELD_PREFETCH_STRIDE);
    CHECK(unchanged());
    /* unknown UUID */
    s.policy.prefetch_stride = 1;
    fx_uuid(s.policy.gpus[3].uuid, 9);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, s), HUVM_NV_ERR_GPU_UUID_NOT_FOUND);
    CHECK_EQ(s.error_field, HUVM_FIELD_GPU_BASE + 3 * HUVM_FIELD_GPU_STRIDE + HUVM_FIELD_GPU_UUID);
    CHECK(unchanged());
    /* contradictory: reserve above capacity */
    fx_uuid(s.policy.gpus[3].uuid, 3);
    s.policy.gpus[3].lend_reserve_bytes = 32 * GIB;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, s), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(s.error_field, HUVM_FIELD_GPU_BASE + 3 * HUVM_FIELD_GPU_STRIDE + HUVM_FIELD_GPU_LEND_RESERVE);
    CHECK(unchanged());
}

TEST(dispatch_stats_and_reset)
{
    static HUVM_GET_STATS_PARAMS s;
    static HUVM_RESET_STATS_PARAMS r;
    HUVM_TEST_EVENT_PARAMS e;

    CHECK_EQ(set_node(4, 16 * GIB), HUVM_NV_OK);
    e = event(HUVM_TEST_EVENT_EVICT, 0, 3);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    HDR(s);
    CHECK_EQ(RUN(&user, HUVM_IOCTL_GET_STATS, s), HUVM_NV_OK);
    CHECK_EQ(s.gpu_count, 4);
    CHECK_EQ(s.timestamp_ns, user.now_ns);
    CHECK_EQ(s.generation, core.policy.generation);
    CHECK_EQ(s.gpus[0].evict_to_peer, 3);
    CHECK(memcmp(s.gpus, core.counters, sizeof(s.gpus)) == 0);
    CHECK(memcmp(s.pairs, core.pairs, sizeof(s.pairs)) == 0);

    HDR(r);
    r.reset_flags = HUVM_RESET_COUNTERS;
    save();
    CHECK_EQ(RUN(&user, HUVM_IOCTL_RESET_STATS, r), HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS);
    CHECK(unchanged());
    r.reset_flags = 0x10;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_RESET_STATS, r), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(r.error_field, HUVM_FIELD_RESET_FLAGS);
    CHECK(unchanged());
    r.reset_flags = HUVM_RESET_COUNTERS;
    r.pad = 1;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_RESET_STATS, r), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(r.error_field, HUVM_FIELD_RESERVED);
    CHECK(unchanged());
    r.pad = 0;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_RESET_STATS, r), HUVM_NV_OK);
    CHECK_EQ(core.counters[0].evict_to_peer, 0);
    CHECK_EQ(core.counters[0].harvested_bytes, 3 * CHUNK);   /* gauge kept */
}

static huvm_status_t fake_list(void *ctx, const huvm_caller_t *caller, HUVM_LIST_VA_SPACES_PARAMS *p)
{
    uint32_t i, total = *(uint32_t *)ctx;

    p->total = total;
    for (i = p->start_index; i < total && p->count < HUVM_MAX_VA_SPACES_PER_CALL; i++) {
        p->entries[p->count].id = i + 1;
        p->entries[p->count].pid = caller->pid;
        p->count++;
    }
    return HUVM_NV_OK;
}

TEST(dispatch_list_va_spaces)
{
    static HUVM_LIST_VA_SPACES_PARAMS p;
    huvm_core_ops_t ops = { NULL, fake_list, NULL };
    uint32_t total = 70;

    CHECK_EQ(set_node(2, 16 * GIB), HUVM_NV_OK);
    HDR(p);
    CHECK_EQ(RUN(&user, HUVM_IOCTL_LIST_VA_SPACES, p), HUVM_NV_OK);     /* no ops: no data */
    CHECK_EQ(p.count + p.total, 0);
    p.start_index = 3;
    CHECK_EQ(RUN(&user, HUVM_IOCTL_LIST_VA_SPACES, p), HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(p.error_field, HUVM_FIELD_START_INDEX);
    p.start_index = 0;
    CHECK_EQ(huvm_dispatch(&core, &ops, &total, &user, HUVM_IOCTL_LIST_VA_SPACES, &p, sizeof(p)), HUVM_NV_OK);
    CHECK_EQ(p.count, 64);
    CHECK_EQ(p.total, 70);
    CHECK_EQ(p.entries[0].pid, user.pid);
    p.start_index = 64;
    CHECK_EQ(huvm_dispatch(&core, &ops, &total, &user, HUVM_IOCTL_LIST_VA_SPACES, &p, sizeof(p)), HUVM_NV_OK);
    CHECK_EQ(p.count, 6);
    CHECK_EQ(p.entries[0].id, 65);
    CHECK_EQ(p.entries[6].id, 0);
    p.start_index = 71;
    CHECK_EQ(huvm_dispatch(&core, &ops, &total, &user, HUVM_IOCTL_LIST_VA_SPACES, &p, sizeof(p)),
             HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(p.count, 0);
    p.start_index = 0;
    p.pad = 1;
    CHECK_EQ(RUN(&user, HUVM_IOCTL_LIST_VA_SPACES, p), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(p.error_field, HUVM_FIELD_RESERVED);
}

static int refreshed, changed;

static void fake_refresh(void *ctx, const huvm_core_t *c, huvm_gpu_info_t *gpus)
{
    (void)ctx;
    (void)c;
    refreshed++;
    gpus[0].free_bytes = 123 * CHUNK;
}

static void fake_changed(void *ctx, const huvm_core_t *c)
{
    (void)ctx;
    (void)c;
    changed++;
}

TEST(dispatch_ops_callbacks)
{
    static HUVM_GET_INFO_PARAMS i;
    static HUVM_SET_POLICY_PARAMS s;
    huvm_core_ops_t ops = { fake_refresh, NULL, fake_changed };

    CHECK_EQ(set_node(2, 16 * GIB), HUVM_NV_OK);
    HDR(i);
    CHECK_EQ(huvm_dispatch(&core, &ops, NULL, &user, HUVM_IOCTL_GET_INFO, &i, sizeof(i)), HUVM_NV_OK);
    CHECK_EQ(refreshed, 1);
    CHECK_EQ(i.gpus[0].free_bytes, 123 * CHUNK);
    CHECK(core.gpus[0].free_bytes != 123 * CHUNK);          /* the answer's copy, not the core */
    HDR(s);
    s.policy = core.policy;
    CHECK_EQ(huvm_dispatch(&core, &ops, NULL, &root, HUVM_IOCTL_SET_POLICY, &s, sizeof(s)), HUVM_NV_OK);
    CHECK_EQ(changed, 1);
    s.policy.peer_select = 77;
    CHECK_EQ(huvm_dispatch(&core, &ops, NULL, &root, HUVM_IOCTL_SET_POLICY, &s, sizeof(s)),
             HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(changed, 1);                                   /* not on refusal */
}

/* The readers run under the kernel's huvm lock taken shared, several at once: their dispatch (callbacks
 * included) must leave the core byte for byte as it was, for any caller. */
/* SET_GPU_RATES: privileged, by UUID of a present GPU, each rate 0..HUVM_MAX_MBYTE_PER_S; refused whole with the
 * field named; GET_GPU_RATES (any user) reads them back; another GPU in the slot or a new node clears them. */
TEST(dispatch_gpu_rates)
{
    HUVM_SET_GPU_RATES_PARAMS s;
    HUVM_GET_GPU_RATES_PARAMS g;
    huvm_gpu_info_t other;

    CHECK_EQ(set_node(3, 16 * GIB), HUVM_NV_OK);
    CHECK(huvm_cmd_privileged(HUVM_IOCTL_SET_GPU_RATES));
    HDR(g);
    CHECK_EQ(RUN(&user, HUVM_IOCTL_GET_GPU_RATES, g), HUVM_NV_OK);
    CHECK_EQ(g.gpu_count, 3);
    CHECK_EQ(g.hbm_mbyte_per_s[1], 0);
    CHECK_EQ(g.giveback_mbyte_per_s[1], 0);

    HDR(s);
    memcpy(s.uuid, core.gpus[1].uuid, sizeof(s.uuid));
    s.hbm_mbyte_per_s = 900000;
    s.giveback_mbyte_per_s = 12000;
    /* not privileged */
    save();
    CHECK_EQ(RUN(&user, HUVM_IOCTL_SET_GPU_RATES, s), HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS);
    CHECK_EQ(s.rmStatus, HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS);
    CHECK(unchanged());
    /* out of range, each field named */
    s.hbm_mbyte_per_s = (uint32_t)HUVM_MAX_MBYTE_PER_S + 1;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_GPU_RATES, s), HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(s.error_field, HUVM_FIELD_RATES_HBM);
    CHECK(unchanged());
    s.hbm_mbyte_per_s = 900000;
    s.giveback_mbyte_per_s = 0xffffffffu;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_GPU_RATES, s), HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(s.error_field, HUVM_FIELD_RATES_GIVEBACK);
    CHECK(unchanged());
    /* the GPU: unknown, zero, or absent */
    s.giveback_mbyte_per_s = 12000;
    fx_uuid(s.uuid, 7);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_GPU_RATES, s), HUVM_NV_ERR_GPU_UUID_NOT_FOUND);
    CHECK_EQ(s.error_field, HUVM_FIELD_RATES_GPU);
    memset(s.uuid, 0, sizeof(s.uuid));
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_GPU_RATES, s), HUVM_NV_ERR_GPU_UUID_NOT_FOUND);
    huvm_core_remove_gpu(&core, 2);
    save();
    memcpy(s.uuid, core.gpus[2].uuid, sizeof(s.uuid));
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_GPU_RATES, s), HUVM_NV_ERR_GPU_UUID_NOT_FOUND);
    CHECK(unchanged());
    /* accepted: only that GPU's rates change, and any user reads them back; the extremes are accepted */
    memcpy(s.uuid, core.gpus[1].uuid, sizeof(s.uuid));
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_GPU_RATES, s), HUVM_NV_OK);
    CHECK_EQ(s.error_field, HUVM_FIELD_NONE);
    CHECK_EQ(core.hbm_mbyte_per_s[1], 900000);
    CHECK_EQ(core.giveback_mbyte_per_s[1], 12000);
    CHECK_EQ(core.hbm_mbyte_per_s[0], 0);
    CHECK_EQ(RUN(&user, HUVM_IOCTL_GET_GPU_RATES, g), HUVM_NV_OK);
    CHECK_EQ(g.hbm_mbyte_per_s[1], 900000);
    CHECK_EQ(g.giveback_mbyte_per_s[1], 12000);
    CHECK_EQ(g.hbm_mbyte_per_s[0], 0);
    memcpy(s.uuid, core.gpus[0].uuid, sizeof(s.uuid));
    s.hbm_mbyte_per_s = (uint32_t)HUVM_MAX_MBYTE_PER_S;
    s.giveback_mbyte_per_s = (uint32_t)HUVM_MAX_MBYTE_PER_S;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_GPU_RATES, s), HUVM_NV_OK);
    CHECK_EQ(core.hbm_mbyte_per_s[0], HUVM_MAX_MBYTE_PER_S);
    /* the same GPU registered again keeps its rates; another GPU in the slot starts unknown */
    other = core.gpus[1];
    CHECK_EQ(huvm_core_set_gpu(&core, 1, &other), HUVM_NV_OK);
    CHECK_EQ(core.hbm_mbyte_per_s[1], 900000);
    fx_uuid(other.uuid, 9);
    CHECK_EQ(huvm_core_set_gpu(&core, 1, &other), HUVM_NV_OK);
    CHECK_EQ(core.hbm_mbyte_per_s[1], 0);
    CHECK_EQ(core.giveback_mbyte_per_s[1], 0);
    /* a new synthetic node clears them all */
    CHECK_EQ(core.hbm_mbyte_per_s[0], HUVM_MAX_MBYTE_PER_S);
    {
        static HUVM_TEST_SET_NODE_PARAMS n;
        uint32_t i;

        HDR(n);
        n.gpu_count = 2;
        for (i = 0; i < 2; i++) {
            fx_uuid(n.gpus[i].uuid, i);
            n.gpus[i].memory_bytes = n.gpus[i].free_bytes = GIB;
            n.gpus[i].flags = HUVM_GPU_FLAG_PRESENT;
        }
        CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_SET_NODE, n), HUVM_NV_OK);
    }
    CHECK_EQ(core.hbm_mbyte_per_s[0], 0);
}

TEST(dispatch_readers_write_nothing_but_params)
{
    static const uint32_t readers[] = { HUVM_IOCTL_GET_INFO, HUVM_IOCTL_GET_POLICY, HUVM_IOCTL_GET_STATS,
                                        HUVM_IOCTL_GET_GPU_RATES };
    static huvm_core_t before;
    static uint8_t params[sizeof(HUVM_GET_STATS_PARAMS) + sizeof(HUVM_GET_INFO_PARAMS) +
                          sizeof(HUVM_GET_POLICY_PARAMS) + sizeof(HUVM_GET_GPU_RATES_PARAMS)];
    huvm_core_ops_t ops = { fake_refresh, NULL, fake_changed };
    HUVM_TEST_EVENT_PARAMS e = event(HUVM_TEST_EVENT_EVICT, 0, 3);
    uint32_t k, cmd;

    CHECK_EQ(set_node(3, 16 * GIB), HUVM_NV_OK);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    for (cmd = HUVM_IOCTL_FIRST; cmd <= HUVM_IOCTL_LAST; cmd++)
        CHECK_EQ(huvm_cmd_reader(cmd), (uint32_t)(cmd == HUVM_IOCTL_GET_INFO || cmd == HUVM_IOCTL_GET_POLICY ||
                                                  cmd == HUVM_IOCTL_GET_STATS || cmd == HUVM_IOCTL_GET_GPU_RATES));
    for (k = 0; k < sizeof(readers) / sizeof(readers[0]); k++) {
        uint32_t size = huvm_cmd_params_size(readers[k]);
        huvm_hdr_t *h = (huvm_hdr_t *)params;

        CHECK(huvm_cmd_privileged(readers[k]) == 0);
        memset(params, 0, sizeof(params));
        h->abi_version = HUVM_ABI_VERSION;
        h->size = size;
        memcpy(&before, &core, sizeof(core));
        CHECK_EQ(huvm_dispatch(&core, &ops, NULL, &user, readers[k], params, size), HUVM_NV_OK);
        CHECK(memcmp(&before, &core, sizeof(core)) == 0);
        CHECK_EQ(huvm_dispatch(&core, &ops, NULL, &root, readers[k], params, size), HUVM_NV_OK);
        CHECK(memcmp(&before, &core, sizeof(core)) == 0);
    }
}

TEST(dispatch_test_commands_need_allow_test)
{
    static HUVM_TEST_SET_NODE_PARAMS n;
    HUVM_TEST_EVENT_PARAMS e = event(HUVM_TEST_EVENT_EVICT, 0, 1);

    CHECK_EQ(set_node(2, 16 * GIB), HUVM_NV_OK);
    save();
    HDR(n);
    n.gpu_count = 1;
    CHECK_EQ(RUN(&user, HUVM_IOCTL_TEST_SET_NODE, n), HUVM_NV_ERR_NOT_SUPPORTED);
    CHECK_EQ(n.rmStatus, HUVM_NV_ERR_NOT_SUPPORTED);
    CHECK_EQ(RUN(&user, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_ERR_NOT_SUPPORTED);
    CHECK(unchanged());
    /* allow_test is not enough: test commands need a privileged caller, and no live GPUs */
    CHECK_EQ(RUN(&user_test, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS);
    CHECK(unchanged());
    {
        huvm_caller_t live = root;

        live.live_gpus = 1;
        CHECK_EQ(RUN(&live, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_ERR_STATE_IN_USE);
        CHECK_EQ(RUN(&live, HUVM_IOCTL_TEST_SET_NODE, n), HUVM_NV_ERR_STATE_IN_USE);
        CHECK(unchanged());
    }
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
}

TEST(dispatch_test_set_node_bad_input)
{
    static HUVM_TEST_SET_NODE_PARAMS n, good;
    uint32_t i, j;

    CHECK_EQ(set_node(3, 16 * GIB), HUVM_NV_OK);
    HDR(good);
    good.gpu_count = 3;
    for (i = 0; i < 3; i++) {
        fx_uuid(good.gpus[i].uuid, i);
        good.gpus[i].memory_bytes = 16 * GIB;
        good.gpus[i].free_bytes = 8 * GIB;
        good.gpus[i].flags = HUVM_GPU_FLAG_PRESENT;
        for (j = 0; j < 3; j++) {
            if (i != j)
                good.links[i][j] = (huvm_link_t){ HUVM_LINK_NVLINK_2, 1, 25000 };
        }
    }
    save();
#define BADN(assign, status, field) do {                                              \
        n = good; assign;                                                              \
        CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_SET_NODE, n), status);                     \
        CHECK_EQ(n.error_field, field);                                                \
        CHECK(unchanged());                                                            \
    } while (0)
#define GF(i, f) (HUVM_FIELD_GPU_BASE + HUVM_FIELD_GPU_STRIDE * (i) + (f))
    BADN(n.gpu_count = 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_GPU_COUNT);
    BADN(n.gpu_count = 17, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_GPU_COUNT);
    BADN(n.pad = 1, HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_RESERVED);
    BADN(memset(n.gpus[1].uuid, 0, 16), HUVM_NV_ERR_INVALID_ARGUMENT, GF(1, HUVM_FIELD_GPU_UUID));
    BADN(memcpy(n.gpus[2].uuid, n.gpus[0].uuid, 16), HUVM_NV_ERR_INVALID_ARGUMENT, GF(2, HUVM_FIELD_GPU_UUID));
    BADN(n.gpus[1].memory_bytes = 0, HUVM_NV_ERR_OUT_OF_RANGE, GF(1, HUVM_FIELD_GPU_MEMORY));
    BADN(n.gpus[1].memory_bytes = 1ULL << 51, HUVM_NV_ERR_OUT_OF_RANGE, GF(1, HUVM_FIELD_GPU_MEMORY));
    BADN(n.gpus[0].free_bytes = 17 * GIB, HUVM_NV_ERR_OUT_OF_RANGE, GF(0, HUVM_FIELD_GPU_FREE));
    BADN(n.gpus[2].flags = 0x100, HUVM_NV_ERR_INVALID_ARGUMENT, GF(2, HUVM_FIELD_GPU_FLAGS));
    BADN(n.gpus[2].pcie_mbyte_per_s = 1ULL << 40, HUVM_NV_ERR_INVALID_ARGUMENT, GF(2, HUVM_FIELD_GPU_FLAGS));
    BADN(n.links[0][1].link_type = 99, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_NODE_LINK);
    BADN(n.links[0][1].mbyte_per_s = 30000, HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_NODE_LINK);   /* asymmetric */
    BADN(n.links[1][1].link_type = HUVM_LINK_PCIE, HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_NODE_LINK);
    BADN(n.links[0][5].link_type = HUVM_LINK_PCIE, HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_NODE_LINK);
    BADN((n.links[0][2].link_type = HUVM_LINK_NONE, n.links[2][0].link_type = HUVM_LINK_NONE),
         HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_NODE_LINK);      /* NONE with a rate */
#undef BADN
#undef GF
    n = good;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_SET_NODE, n), HUVM_NV_OK);
    CHECK_EQ(core.gpus[0].free_bytes, 8 * GIB);
}

TEST(dispatch_test_event_bad_input)
{
    HUVM_TEST_EVENT_PARAMS e;

    CHECK_EQ(set_node(2, 16 * GIB), HUVM_NV_OK);
    save();
#define BADE(ev, gpu, count, fl, status, field) do {                                    \
        e = event(ev, gpu, count); e.flags = fl;                                         \
        CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), status);                          \
        CHECK_EQ(e.error_field, field);                                                  \
        CHECK_EQ(e.rmStatus, status);                                                    \
        CHECK(unchanged());                                                              \
    } while (0)
    BADE(HUVM_TEST_EVENT_COUNT, 0, 1, 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_TEST_EVENT);
    BADE(HUVM_TEST_EVENT_EVICT, 2, 1, 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_TEST_GPU);
    BADE(HUVM_TEST_EVENT_EVICT, 0, 0, 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_TEST_COUNT);
    BADE(HUVM_TEST_EVENT_EVICT, 0, 4097, 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_TEST_COUNT);
    BADE(HUVM_TEST_EVENT_EVICT, 0, 1, 2, HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_TEST_FLAGS);
    BADE(HUVM_TEST_EVENT_FAULT, 0, 1, 1, HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_TEST_FLAGS);
    huvm_core_remove_gpu(&core, 1);
    save();
    BADE(HUVM_TEST_EVENT_EVICT, 1, 1, 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_TEST_GPU);
    huvm_core_init(&core, HUVM_BACKEND_CORE, HUVM_PRESET_HUVM);
    save();
    BADE(HUVM_TEST_EVENT_EVICT, 0, 1, 0, HUVM_NV_ERR_INVALID_STATE, HUVM_FIELD_TEST_GPU);
#undef BADE
}

TEST(dispatch_test_events_drive_counters)
{
    HUVM_TEST_EVENT_PARAMS e;
    uint64_t free1;

    CHECK_EQ(set_node(3, 16 * GIB), HUVM_NV_OK);
    huvm_test_trace_reset();
    /* EVICT: peers (most free by bandwidth) */
    e = event(HUVM_TEST_EVENT_EVICT, 0, 4);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    CHECK_EQ(e.done, 4);
    CHECK_EQ(e.to_peer, 4);
    CHECK_EQ(e.last_reason, HUVM_REASON_PEER);
    CHECK_EQ(core.counters[0].evict_to_peer, 4);
    CHECK_EQ(core.counters[0].harvested_bytes, 4 * CHUNK);
    CHECK_EQ(core.counters[1].lent_bytes + core.counters[2].lent_bytes, 4 * CHUNK);
    CHECK_EQ(huvm_test_trace_count("evict"), 4);
    CHECK_EQ(huvm_test_events[0].va, 0x7f0000000000ULL);
    CHECK_EQ(huvm_test_events[1].va, 0x7f0000000000ULL + CHUNK);
    /* free bytes moved: peers lost 4 chunks in all */
    CHECK_EQ(core.gpus[1].free_bytes + core.gpus[2].free_bytes, 32 * GIB - 4 * CHUNK);
    /* EVICT in PMA context: host */
    e = event(HUVM_TEST_EVENT_EVICT, 0, 2);
    e.flags = 1;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    CHECK_EQ(e.to_peer, 0);
    CHECK_EQ(e.last_dst, HUVM_DEST_HOST);
    CHECK_EQ(e.last_reason, HUVM_REASON_PMA_CONTEXT);
    CHECK_EQ(core.counters[0].host_reason[HUVM_REASON_PMA_CONTEXT], 2);
    /* FAULT: 4 harvested chunks come back from peers, 2 more from host */
    e = event(HUVM_TEST_EVENT_FAULT, 0, 6);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    CHECK_EQ(e.done, 6);
    CHECK_EQ(e.to_peer, 4);
    CHECK_EQ(core.counters[0].fetch_from_peer, 4);
    CHECK_EQ(core.counters[0].fetch_from_host, 2);
    CHECK_EQ(core.counters[0].harvested_bytes, 0);
    CHECK_EQ(core.counters[0].faults, 6);
    CHECK_EQ(core.gpus[1].free_bytes + core.gpus[2].free_bytes, 32 * GIB);
    /* PREFETCH (multipath 16 chunks, equal PCIe: 8 + 8; the huvm preset's own mode is two-stage) */
    core.policy.prefetch_mode = HUVM_PREFETCH_MULTIPATH;
    e = event(HUVM_TEST_EVENT_PREFETCH, 0, 16);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    CHECK_EQ(e.done, 16);
    CHECK_EQ(e.to_peer, 8);
    CHECK_EQ(core.counters[0].prefetch_local, 8);
    CHECK_EQ(core.counters[0].prefetch_to_peer, 8);
    CHECK_EQ(huvm_test_trace_count("prefetch"), 16);
    /* GIVEBACK on the holder of the prefetched chunks: guests first */
    free1 = core.gpus[e.last_dst].free_bytes;
    {
        uint32_t holder = e.last_dst;

        e = event(HUVM_TEST_EVENT_GIVEBACK, holder, 10);
        CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
        CHECK_EQ(e.done, 10);
        CHECK_EQ(e.to_peer, 10);                        /* 8 guest chunks, then 2 of its own to peers */
        CHECK_EQ(core.counters[holder].giveback, 8);
        CHECK_EQ(core.pairs[0][holder].giveback_chunks, 8);
        CHECK_EQ(core.counters[holder].lent_bytes, 0);
        CHECK_EQ(core.counters[holder].evict_to_peer, 2);
        CHECK(core.gpus[holder].free_bytes >= free1 + 8 * CHUNK);
        CHECK_EQ(huvm_test_trace_count("giveback"), 8);
    }
}

TEST(dispatch_test_preevict_and_remote_map)
{
    static HUVM_SET_POLICY_PARAMS s;
    static HUVM_TEST_SET_NODE_PARAMS n;
    HUVM_TEST_EVENT_PARAMS e;
    uint32_t i, j;

    /* GPU 0 nearly full: pre-eviction restores the reserve (huvm preset: 64 chunks, refilled in one pass) */
    HDR(n);
    n.gpu_count = 2;
    for (i = 0; i < 2; i++) {
        fx_uuid(n.gpus[i].uuid, i);
        n.gpus[i].memory_bytes = 16 * GIB;
        n.gpus[i].free_bytes = i == 0 ? 2 * CHUNK : 16 * GIB;
        n.gpus[i].pcie_mbyte_per_s = 16000;
        n.gpus[i].flags = HUVM_GPU_FLAG_PRESENT;
        for (j = 0; j < 2; j++) {
            if (i != j)
                n.links[i][j] = (huvm_link_t){ HUVM_LINK_NVLINK_2, 1, 25000 };
        }
    }
    core.policy.preset = HUVM_PRESET_HUVM;
    huvm_core_init(&core, HUVM_BACKEND_CORE, HUVM_PRESET_HUVM);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_SET_NODE, n), HUVM_NV_OK);
    huvm_test_trace_reset();
    e = event(HUVM_TEST_EVENT_PREEVICT, 0, 3);              /* count caps the pass */
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    CHECK_EQ(e.done, 3);
    CHECK_EQ(core.counters[0].preevict_to_peer, 3);
    CHECK_EQ(huvm_test_trace_count("preevict"), 3);
    CHECK_EQ(huvm_test_trace_count("evict"), 0);
    e = event(HUVM_TEST_EVENT_PREEVICT, 0, 100);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    CHECK_EQ(e.done, 59);                                   /* 2 + 3 + 59 = 64, in one pass */
    e = event(HUVM_TEST_EVENT_PREEVICT, 0, 100);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    CHECK_EQ(e.done, 0);
    /* remote map: faults map the peer's copy, data stays */
    HDR(s);
    s.policy = core.policy;
    s.policy.generation = 0;
    s.policy.fetch_mode = HUVM_FETCH_REMOTE_MAP;
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, s), HUVM_NV_OK);
    e = event(HUVM_TEST_EVENT_FAULT, 0, 2);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
    CHECK_EQ(e.to_peer, 2);
    CHECK_EQ(e.last_reason, HUVM_FETCH_REMOTE_MAP);
    CHECK_EQ(core.counters[0].remote_map, 2);
    CHECK_EQ(core.counters[0].harvested_bytes, 62 * CHUNK);          /* 3 + 59 pre-evicted, none moved back */
}

TEST(dispatch_stock_node_never_uses_peers)
{
    static HUVM_SET_POLICY_PARAMS s;
    HUVM_TEST_EVENT_PARAMS e;
    uint32_t ev;

    CHECK_EQ(set_node(4, 16 * GIB), HUVM_NV_OK);
    HDR(s);
    CHECK_EQ(huvm_policy_preset(HUVM_PRESET_STOCK, &core, &s.policy), HUVM_NV_OK);
    CHECK_EQ(RUN(&root, HUVM_IOCTL_SET_POLICY, s), HUVM_NV_OK);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_STOCK);
    for (ev = 0; ev < HUVM_TEST_EVENT_COUNT; ev++) {
        e = event(ev, 1, 5);
        CHECK_EQ(RUN(&root, HUVM_IOCTL_TEST_EVENT, e), HUVM_NV_OK);
        CHECK_EQ(e.to_peer, 0);
    }
    CHECK_EQ(core.counters[1].evict_to_peer, 0);
    CHECK_EQ(core.counters[1].host_reason[HUVM_REASON_TIER_OFF], 5 + 5);   /* EVICT + GIVEBACK's own */
    CHECK_EQ(core.counters[1].prefetch_local + core.counters[1].prefetch_to_peer, 0);
}
