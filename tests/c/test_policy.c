/*
 * huvm: tests of the policy model (huvm_policy.c): presets, validation, atomic apply. SPDX-License-Identifier: MIT
 */
#include "huvm_test.h"
#include "huvm_internal.h"

static huvm_core_t core;
static huvm_core_t saved;

static huvm_policy_t current(void)
{
    huvm_policy_t p = core.policy;

    p.generation = 0;
    return p;
}

/* Apply p; expect refusal with status and field, and the core unchanged. */
static int refused(const huvm_policy_t *p, huvm_status_t status, uint32_t field)
{
    uint32_t ef = 12345;
    huvm_status_t st;

    memcpy(&saved, &core, sizeof(core));
    st = huvm_policy_apply(&core, p, &ef);
    if (st != status || ef != field) {
        printf("    got status 0x%x field %u, want 0x%x field %u\n", st, ef, status, field);
        return 0;
    }
    return memcmp(&saved, &core, sizeof(core)) == 0;
}

#define GF(i, f) (HUVM_FIELD_GPU_BASE + HUVM_FIELD_GPU_STRIDE * (i) + (f))

TEST(policy_names)
{
    CHECK(strcmp(huvm_preset_name(HUVM_PRESET_STOCK), "stock") == 0);
    CHECK(strcmp(huvm_preset_name(HUVM_PRESET_ATC22), "huvm-atc22") == 0);
    CHECK(strcmp(huvm_preset_name(HUVM_PRESET_HUVM), "huvm") == 0);
    CHECK(strcmp(huvm_preset_name(HUVM_PRESET_CUSTOM), "custom") == 0);
    CHECK(strcmp(huvm_preset_name(99), "unknown") == 0);
    CHECK(strcmp(huvm_reason_name(HUVM_REASON_PEER), "peer") == 0);
    CHECK(strcmp(huvm_reason_name(HUVM_REASON_HYSTERESIS), "hysteresis") == 0);
    CHECK(strcmp(huvm_reason_name(HUVM_REASON_GIVEBACK), "giveback") == 0);
    CHECK(strcmp(huvm_reason_name(HUVM_REASON_LENDER_BUSY), "lender_busy") == 0);
    CHECK(strcmp(huvm_reason_name(HUVM_REASON_COUNT), "unknown") == 0);
}

TEST(policy_presets_values)
{
    huvm_policy_t p;
    uint32_t i;

    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
    CHECK_EQ(huvm_policy_preset(HUVM_PRESET_STOCK, &core, &p), HUVM_NV_OK);
    CHECK_EQ(p.gpu_count, 4);
    for (i = 0; i < 4; i++) {
        CHECK_EQ(p.gpus[i].role, HUVM_ROLE_NONE);
        CHECK_EQ(p.gpus[i].lend_slowdown_max_pct, 0);
    }
    CHECK_EQ(p.prefetch_mode, HUVM_PREFETCH_OFF);
    CHECK_EQ(p.preevict_chunks, 0);

    CHECK_EQ(huvm_policy_preset(HUVM_PRESET_ATC22, &core, &p), HUVM_NV_OK);
    CHECK_EQ(p.peer_select, HUVM_PEER_SELECT_FEWEST_LENT);
    CHECK_EQ(p.peer_usage_max_pct, 85);
    CHECK_EQ(p.preevict_chunks, 50);
    CHECK_EQ(p.prefetch_mode, HUVM_PREFETCH_TWO_STAGE);     /* uvm_prefetch_flags 3 */
    CHECK_EQ(p.prefetch_chunks, 16);
    CHECK_EQ(p.prefetch_stride, 2);
    CHECK_EQ(p.hysteresis_ms, 0);
    CHECK_EQ(p.nvlink_only, 1);
    CHECK_EQ(p.fetch_mode, HUVM_FETCH_MIGRATE);
    for (i = 0; i < 4; i++) {
        CHECK_EQ(p.gpus[i].role, HUVM_ROLE_BOTH);
        CHECK_EQ(p.gpus[i].lend_limit_bytes, HUVM_UNLIMITED);
        CHECK_EQ(p.gpus[i].lend_reserve_bytes, 0);
        CHECK_EQ(p.gpus[i].flags, 0);                           /* the prototype pre-evicts below its reserve */
        CHECK_EQ(p.gpus[i].lend_slowdown_max_pct, 0);           /* the prototype knows no lender bound */
    }

    CHECK_EQ(huvm_policy_preset(HUVM_PRESET_HUVM, &core, &p), HUVM_NV_OK);
    for (i = 0; i < 4; i++)
        CHECK_EQ(p.gpus[i].lend_slowdown_max_pct, 2);           /* the lender bound T: 2 % */
    for (i = 0; i < 4; i++)
        CHECK_EQ(p.gpus[i].flags, HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE | HUVM_GPU_POLICY_LEND_ABOVE_PEAK |
                                  HUVM_GPU_POLICY_PREFETCH_FEEDBACK | HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL);
    CHECK_EQ(p.peer_select, HUVM_PEER_SELECT_FASTEST_LINK);
    CHECK_EQ(p.hysteresis_ms, 5);
    CHECK_EQ(p.peer_usage_max_pct, 90);
    CHECK_EQ(p.prefetch_mode, HUVM_PREFETCH_TWO_STAGE);         /* docs/policy.md: measured choice */
    CHECK_EQ(p.prefetch_stride, 2);
    CHECK_EQ(p.preevict_chunks, 64);                            /* docs/policy.md: measured choice */
    CHECK_EQ(p.preevict_batch, 64);                             /* the reserve refills in one pass */
    CHECK_EQ(p.gpus[0].lend_reserve_bytes, 1 * GIB);            /* max(5% of 16 GiB, min(1 GiB, 1/16)) */
    CHECK_EQ(huvm_policy_preset(HUVM_PRESET_CUSTOM, &core, &p), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(huvm_policy_preset(HUVM_PRESET_HUVM, NULL, &p), HUVM_NV_OK);
    CHECK_EQ(p.gpu_count, 0);

    /* every preset validates on this node and keeps its name when applied */
    for (i = 0; i < HUVM_PRESET_CUSTOM; i++) {
        CHECK_EQ(huvm_policy_preset(i, &core, &p), HUVM_NV_OK);
        CHECK_EQ(huvm_policy_validate(&core, &p, NULL), HUVM_NV_OK);
        CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
        CHECK_EQ(core.policy.preset, i);
    }
    /* a small GPU keeps the 16 GiB GPU's share, 1/16 (3 GiB: 192 MiB; 512 MiB: 32 MiB) */
    fx_node(&core, 2, 3 * GIB, HUVM_PRESET_HUVM);
    CHECK_EQ(huvm_policy_gpu(&core, 0)->lend_reserve_bytes, 3 * GIB / 16);
    fx_node(&core, 2, 256 * CHUNK, HUVM_PRESET_HUVM);
    CHECK_EQ(huvm_policy_gpu(&core, 0)->lend_reserve_bytes, 16 * CHUNK);
    /* a large one 5 % (80 GiB: 4 GiB) */
    fx_node(&core, 2, 80 * GIB, HUVM_PRESET_HUVM);
    CHECK_EQ(huvm_policy_gpu(&core, 0)->lend_reserve_bytes, 4 * GIB);
}

TEST(policy_preset_preevict_fits_small_gpus)
{
    huvm_gpu_info_t info;
    huvm_policy_t p;
    uint64_t gen;
    uint32_t i;

    /* 64 MiB GPUs (32 chunks): the presets' reserves (64, 50) are cut to what validation allows */
    for (i = HUVM_PRESET_ATC22; i <= HUVM_PRESET_HUVM; i++) {
        fx_node(&core, 2, 32 * CHUNK, i);
        CHECK_EQ(core.policy.preset, i);
        CHECK_EQ(core.policy.preevict_chunks, 32);
        CHECK_EQ(core.policy.preevict_batch, 32);
        CHECK_EQ(huvm_policy_preset(i, &core, &p), HUVM_NV_OK);
        CHECK_EQ(p.preevict_chunks, 32);
        CHECK_EQ(huvm_policy_validate(&core, &p, NULL), HUVM_NV_OK);
        /* a GET -> SET round trip of the current policy is accepted and keeps the preset's name */
        p = core.policy;
        p.generation = 0;
        CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
        CHECK_EQ(core.policy.preset, i);
    }
    /* a smaller GPU joining a named preset refits it (and bumps the generation); big ones are untouched */
    fx_node(&core, 2, 16 * GIB, HUVM_PRESET_HUVM);
    CHECK_EQ(core.policy.preevict_chunks, 64);
    gen = core.policy.generation;
    memset(&info, 0, sizeof(info));
    fx_uuid(info.uuid, 7);
    info.memory_bytes = 20 * CHUNK;
    info.flags = HUVM_GPU_FLAG_PRESENT;
    CHECK_EQ(huvm_core_set_gpu(&core, 2, &info), HUVM_NV_OK);
    CHECK_EQ(core.policy.preevict_chunks, 20);
    CHECK_EQ(core.policy.preevict_batch, 20);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_HUVM);
    CHECK(core.policy.generation > gen);
    p = core.policy;
    p.generation = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    /* under a custom policy the user's value stays (and validation guards it) */
    p = core.policy;
    p.generation = 0;
    p.preevict_chunks = 10;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_CUSTOM);
    fx_uuid(info.uuid, 8);
    info.memory_bytes = 4 * CHUNK;
    CHECK_EQ(huvm_core_set_gpu(&core, 3, &info), HUVM_NV_OK);
    CHECK_EQ(core.policy.preevict_chunks, 10);
}

TEST(policy_init_defaults)
{
    huvm_core_init(&core, HUVM_BACKEND_KERNEL, 77);     /* unknown preset: ours */
    CHECK_EQ(core.policy.preset, HUVM_PRESET_HUVM);
    CHECK_EQ(core.policy.generation, 1);
    CHECK_EQ(core.gpu_count, 0);
    CHECK_EQ(core.policy_slot[0], -1);
    CHECK(huvm_policy_gpu(&core, 0) == NULL);
}

TEST(policy_node_wide_ranges)
{
    huvm_policy_t p;

    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
#define BAD(field_assign, status, field) do { p = current(); field_assign; CHECK(refused(&p, status, field)); } while (0)
    BAD(p.preset = HUVM_PRESET_COUNT, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PRESET);
    BAD(p.peer_select = HUVM_PEER_SELECT_COUNT, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PEER_SELECT);
    BAD(p.nvlink_only = 2, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_NVLINK_ONLY);
    BAD(p.peer_usage_max_pct = 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PEER_USAGE_MAX_PCT);
    BAD(p.peer_usage_max_pct = 101, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PEER_USAGE_MAX_PCT);
    BAD(p.preevict_chunks = 70000, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREEVICT_CHUNKS);
    BAD(p.preevict_batch = 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREEVICT_BATCH);
    BAD(p.preevict_batch = 5000, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREEVICT_BATCH);
    BAD(p.fetch_mode = HUVM_FETCH_COUNT, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_FETCH_MODE);
    BAD(p.prefetch_mode = HUVM_PREFETCH_COUNT, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREFETCH_MODE);
    BAD(p.prefetch_chunks = HUVM_PREFETCH_MAX_CHUNKS + 1, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREFETCH_CHUNKS);
    BAD(p.prefetch_chunks = 0, HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_PREFETCH_CHUNKS);
    BAD(p.prefetch_stride = 0, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREFETCH_STRIDE);
    BAD(p.prefetch_stride = HUVM_PREFETCH_MAX_STRIDE + 1, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREFETCH_STRIDE);
    BAD((p.prefetch_chunks = 64, p.prefetch_stride = 16), HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_PREFETCH_STRIDE);
    BAD(p.hysteresis_ms = HUVM_HYSTERESIS_MAX_MS + 1, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_HYSTERESIS_MS);
    BAD(p.gpu_count = HUVM_MAX_GPUS + 1, HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_GPU_COUNT);
    /* contradictory: a pre-eviction reserve larger than a GPU (16 GiB = 8192 chunks) */
    BAD(p.preevict_chunks = 8193, HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_PREEVICT_CHUNKS);
    /* edges that are fine */
    p = current();
    p.prefetch_mode = HUVM_PREFETCH_OFF;
    p.prefetch_chunks = 0;
    p.preevict_chunks = 8192;
    p.peer_usage_max_pct = 100;
    p.hysteresis_ms = HUVM_HYSTERESIS_MAX_MS;
    p.prefetch_stride = HUVM_PREFETCH_MAX_STRIDE;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
#undef BAD
}

TEST(policy_gpu_entries)
{
    huvm_policy_t p;
    uint8_t unknown[16];

    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
    p = current();
    p.gpus[2].role = HUVM_ROLE_COUNT;
    CHECK(refused(&p, HUVM_NV_ERR_OUT_OF_RANGE, GF(2, HUVM_FIELD_GPU_ROLE)));
    p = current();
    p.gpus[1].flags = 0x80000000u;                           /* an unknown flag */
    CHECK(refused(&p, HUVM_NV_ERR_INVALID_ARGUMENT, GF(1, HUVM_FIELD_GPU_FLAGS)));
    p = current();
    p.gpus[1].flags = HUVM_GPU_POLICY_LEND_ABOVE_PEAK;       /* a known one may be cleared (and set) */
    p.generation = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_CUSTOM);
    p = current();
    p.gpus[1].flags = HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE | HUVM_GPU_POLICY_LEND_ABOVE_PEAK |
                      HUVM_GPU_POLICY_PREFETCH_FEEDBACK | HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL;
    p.generation = 0;
    p.preset = HUVM_PRESET_HUVM;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_HUVM);
    p = current();
    memcpy(p.gpus[3].uuid, p.gpus[0].uuid, 16);
    CHECK(refused(&p, HUVM_NV_ERR_INVALID_ARGUMENT, GF(3, HUVM_FIELD_GPU_UUID)));
    p = current();
    memset(p.gpus[1].uuid, 0, 16);
    CHECK(refused(&p, HUVM_NV_ERR_INVALID_ARGUMENT, GF(1, HUVM_FIELD_GPU_UUID)));
    p = current();
    fx_uuid(unknown, 11);
    memcpy(p.gpus[2].uuid, unknown, 16);
    CHECK(refused(&p, HUVM_NV_ERR_GPU_UUID_NOT_FOUND, GF(2, HUVM_FIELD_GPU_UUID)));
    /* contradictory: lend reserve above the GPU's memory */
    p = current();
    p.gpus[1].lend_reserve_bytes = 16 * GIB + 1;
    CHECK(refused(&p, HUVM_NV_ERR_INVALID_ARGUMENT, GF(1, HUVM_FIELD_GPU_LEND_RESERVE)));
    /* a lender (or both) allowed to lend nothing is a contradiction: refused */
    p = current();
    p.gpus[2].role = HUVM_ROLE_LENDER;
    p.gpus[2].lend_limit_bytes = 0;
    CHECK(refused(&p, HUVM_NV_ERR_INVALID_ARGUMENT, GF(2, HUVM_FIELD_GPU_LEND_LIMIT)));
    p.gpus[2].role = HUVM_ROLE_BOTH;
    CHECK(refused(&p, HUVM_NV_ERR_INVALID_ARGUMENT, GF(2, HUVM_FIELD_GPU_LEND_LIMIT)));
    /* a guest-traffic budget below one chunk per window, above the bound, or a slowdown bound over 100 %:
     * refused */
    p = current();
    p.gpus[1].lend_traffic_mbyte_per_s = HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S - 1;
    CHECK(refused(&p, HUVM_NV_ERR_OUT_OF_RANGE, GF(1, HUVM_FIELD_GPU_LEND_TRAFFIC)));
    p.gpus[1].lend_traffic_mbyte_per_s = (uint32_t)HUVM_MAX_MBYTE_PER_S + 1;
    CHECK(refused(&p, HUVM_NV_ERR_OUT_OF_RANGE, GF(1, HUVM_FIELD_GPU_LEND_TRAFFIC)));
    p.gpus[1].lend_traffic_mbyte_per_s = 0;
    p.gpus[1].lend_slowdown_max_pct = 101;
    CHECK(refused(&p, HUVM_NV_ERR_OUT_OF_RANGE, GF(1, HUVM_FIELD_GPU_LEND_SLOWDOWN)));
    p.gpus[1].lend_slowdown_max_pct = ~0u;
    CHECK(refused(&p, HUVM_NV_ERR_OUT_OF_RANGE, GF(1, HUVM_FIELD_GPU_LEND_SLOWDOWN)));
    /* the minimum budget is one chunk per window */
    CHECK(HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S * HUVM_LEND_TRAFFIC_WINDOW_MS * 1000ULL >= HUVM_CHUNK_SIZE);
    CHECK((HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S - 1) * HUVM_LEND_TRAFFIC_WINDOW_MS * 1000ULL < HUVM_CHUNK_SIZE);
    p.gpus[1].lend_slowdown_max_pct = 100;              /* 0 (no bound), 1..100: fine */
    p.gpus[2].lend_slowdown_max_pct = 1;
    p.gpus[3].lend_slowdown_max_pct = 0;
    p.gpus[1].lend_traffic_mbyte_per_s = HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S;
    p.gpus[2].lend_traffic_mbyte_per_s = (uint32_t)HUVM_MAX_MBYTE_PER_S;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_policy_gpu(&core, 1)->lend_slowdown_max_pct, 100);
    CHECK_EQ(huvm_policy_gpu(&core, 3)->lend_slowdown_max_pct, 0);
    CHECK_EQ(huvm_policy_gpu(&core, 1)->lend_traffic_mbyte_per_s, HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_CUSTOM);
    /* fine: reserve == memory, a one-chunk lend limit with a lender role, a harvester that lends nothing,
     * unlimited */
    p = current();
    p.gpus[1].lend_reserve_bytes = 16 * GIB;
    p.gpus[0].role = HUVM_ROLE_HARVESTER;
    p.gpus[0].lend_limit_bytes = 0;
    p.gpus[2].role = HUVM_ROLE_LENDER;
    p.gpus[2].lend_limit_bytes = HUVM_CHUNK_SIZE;
    p.gpus[3].lend_limit_bytes = HUVM_UNLIMITED;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_policy_gpu(&core, 2)->role, HUVM_ROLE_LENDER);
    CHECK_EQ(huvm_policy_gpu(&core, 1)->lend_reserve_bytes, 16 * GIB);
}

TEST(policy_generation)
{
    huvm_policy_t p;
    uint64_t g;

    fx_node(&core, 2, 16 * GIB, HUVM_PRESET_HUVM);
    g = core.policy.generation;
    p = core.policy;                            /* matching generation */
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.generation, g + 1);
    CHECK(refused(&p, HUVM_NV_ERR_STATE_IN_USE, HUVM_FIELD_GENERATION));   /* stale now */
    p.generation = 0;                           /* unconditional */
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.generation, g + 2);
    /* a stale generation is refused before anything else, even with bad fields */
    p.generation = 1;
    p.peer_select = 99;
    CHECK(refused(&p, HUVM_NV_ERR_STATE_IN_USE, HUVM_FIELD_GENERATION));
}

TEST(policy_merge_and_preset_label)
{
    huvm_policy_t p;

    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_HUVM);
    /* only GPU 2's entry listed: the others stay */
    p = current();
    p.gpu_count = 1;
    p.gpus[0] = core.policy.gpus[2];
    p.gpus[0].role = HUVM_ROLE_LENDER;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.gpu_count, 4);
    CHECK_EQ(huvm_policy_gpu(&core, 2)->role, HUVM_ROLE_LENDER);
    CHECK_EQ(huvm_policy_gpu(&core, 1)->role, HUVM_ROLE_BOTH);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_CUSTOM);       /* differs from huvm now */
    /* back to the preset exactly: the label comes back */
    CHECK_EQ(huvm_policy_preset(HUVM_PRESET_HUVM, &core, &p), HUVM_NV_OK);
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_HUVM);
    /* naming a preset with other values gives custom */
    p.hysteresis_ms = 7;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_CUSTOM);
    /* stock node-wide fields with one GPU harvesting: custom */
    CHECK_EQ(huvm_policy_preset(HUVM_PRESET_STOCK, &core, &p), HUVM_NV_OK);
    p.gpus[0].role = HUVM_ROLE_HARVESTER;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_CUSTOM);
}

TEST(policy_entries_outlive_gpus)
{
    huvm_gpu_info_t info;
    huvm_policy_t p;
    uint32_t i;

    fx_node(&core, 3, 16 * GIB, HUVM_PRESET_HUVM);
    huvm_core_remove_gpu(&core, 1);
    CHECK_EQ(core.gpus[1].flags & HUVM_GPU_FLAG_PRESENT, 0);
    /* SET accepts the absent GPU's entry, checked against its last known capacity */
    p = current();
    p.gpus[1].role = HUVM_ROLE_LENDER;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    p.gpus[1].lend_reserve_bytes = 17 * GIB;
    CHECK(refused(&p, HUVM_NV_ERR_INVALID_ARGUMENT, GF(1, HUVM_FIELD_GPU_LEND_RESERVE)));
    /* the GPU comes back: same entry */
    info = core.gpus[1];
    info.flags |= HUVM_GPU_FLAG_PRESENT;
    CHECK_EQ(huvm_core_set_gpu(&core, 1, &info), HUVM_NV_OK);
    CHECK_EQ(huvm_policy_gpu(&core, 1)->role, HUVM_ROLE_LENDER);
    /* slot 1 replaced by another GPU: the old entry stays in the table, unreachable by index but settable */
    memset(&info, 0, sizeof(info));
    fx_uuid(info.uuid, 20);
    info.memory_bytes = 8 * GIB;
    info.free_bytes = 8 * GIB;
    info.flags = HUVM_GPU_FLAG_PRESENT;
    CHECK_EQ(huvm_core_set_gpu(&core, 1, &info), HUVM_NV_OK);
    CHECK_EQ(core.policy.gpu_count, 4);
    CHECK_EQ(huvm_policy_gpu(&core, 1)->role, HUVM_ROLE_BOTH);  /* CUSTOM, tier in use: huvm defaults */
    p = current();
    p.gpu_count = 1;
    fx_uuid(p.gpus[0].uuid, 1);
    p.gpus[0].role = HUVM_ROLE_NONE;
    p.gpus[0].lend_limit_bytes = HUVM_UNLIMITED;
    p.gpus[0].lend_reserve_bytes = 40 * GIB;    /* capacity unknown now: only the absolute bound */
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    p.gpus[0].lend_reserve_bytes = (1ULL << 50) + 1;
    CHECK(refused(&p, HUVM_NV_ERR_OUT_OF_RANGE, GF(0, HUVM_FIELD_GPU_LEND_RESERVE)));
    /* fill the table: 16 entries; a 17th UUID reuses the entry of a GPU no slot knows */
    for (i = 3; i < HUVM_MAX_GPUS; i++) {
        memset(&info, 0, sizeof(info));
        fx_uuid(info.uuid, 30 + i);
        info.memory_bytes = 8 * GIB;
        info.flags = HUVM_GPU_FLAG_PRESENT;
        CHECK_EQ(huvm_core_set_gpu(&core, i, &info), HUVM_NV_OK);
    }
    CHECK_EQ(core.policy.gpu_count, HUVM_MAX_GPUS);
    fx_uuid(info.uuid, 60);
    CHECK_EQ(huvm_core_set_gpu(&core, 5, &info), HUVM_NV_OK);
    CHECK_EQ(core.policy.gpu_count, HUVM_MAX_GPUS);
    CHECK(huvm_policy_gpu(&core, 5) != NULL);
    for (i = 0; i < core.gpu_count; i++)
        CHECK(huvm_policy_gpu(&core, i) != NULL);
}

TEST(policy_set_gpu_and_links_bad_input)
{
    huvm_gpu_info_t info;
    huvm_link_t l = { HUVM_LINK_NVLINK_2, 1, 25000 };
    uint32_t field = 0;

    fx_node(&core, 2, 16 * GIB, HUVM_PRESET_HUVM);
    info = core.gpus[0];
    CHECK_EQ(huvm_core_set_gpu(&core, HUVM_MAX_GPUS, &info), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(huvm_core_set_gpu(&core, 1, &info), HUVM_NV_ERR_INVALID_ARGUMENT);  /* GPU 0's UUID */
    CHECK_EQ(huvm_core_set_gpu(&core, 0, NULL), HUVM_NV_ERR_INVALID_ARGUMENT);
    info.free_bytes = info.memory_bytes + 1;
    CHECK_EQ(huvm_core_set_gpu(&core, 0, &info), HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(huvm_core_check_gpu_info(&info, &field), HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(field, HUVM_FIELD_GPU_FREE);
    info = core.gpus[0];
    info.memory_bytes = 0;
    CHECK_EQ(huvm_core_set_gpu(&core, 0, &info), HUVM_NV_ERR_OUT_OF_RANGE);
    info = core.gpus[0];
    info.flags = 0x80;
    CHECK_EQ(huvm_core_set_gpu(&core, 0, &info), HUVM_NV_ERR_INVALID_ARGUMENT);
    info = core.gpus[0];
    memset(info.uuid, 0, 16);
    CHECK_EQ(huvm_core_set_gpu(&core, 0, &info), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(huvm_core_set_link(&core, 0, 16, &l), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(huvm_core_set_link(&core, 0, 0, &l), HUVM_NV_ERR_INVALID_ARGUMENT);
    l.link_type = HUVM_LINK_COUNT;
    CHECK_EQ(huvm_core_set_link(&core, 0, 1, &l), HUVM_NV_ERR_OUT_OF_RANGE);
    l.link_type = HUVM_LINK_NONE;
    CHECK_EQ(huvm_core_set_link(&core, 0, 1, &l), HUVM_NV_ERR_INVALID_ARGUMENT);
    l.link_type = HUVM_LINK_NVLINK_3;
    l.mbyte_per_s = 1ULL << 40;
    CHECK_EQ(huvm_core_set_link(&core, 0, 1, &l), HUVM_NV_ERR_OUT_OF_RANGE);
    l.mbyte_per_s = 50000;
    CHECK_EQ(huvm_core_set_link(&core, 1, 0, &l), HUVM_NV_OK);
    CHECK_EQ(core.links[0][1].mbyte_per_s, 50000);  /* symmetric */
    CHECK_EQ(core.links[1][0].link_type, HUVM_LINK_NVLINK_3);
    huvm_core_remove_gpu(&core, 9);                 /* no-op */
    CHECK_EQ(huvm_policy_validate(NULL, &core.policy, NULL), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(huvm_policy_apply(&core, NULL, NULL), HUVM_NV_ERR_INVALID_ARGUMENT);
}

TEST(policy_new_gpu_defaults)
{
    huvm_gpu_info_t info;
    huvm_policy_t p;

    /* stock: a new GPU gets role NONE; a custom policy with the tier off too */
    fx_node(&core, 1, 16 * GIB, HUVM_PRESET_STOCK);
    memset(&info, 0, sizeof(info));
    fx_uuid(info.uuid, 5);
    info.memory_bytes = 16 * GIB;
    info.flags = HUVM_GPU_FLAG_PRESENT;
    CHECK_EQ(huvm_core_set_gpu(&core, 1, &info), HUVM_NV_OK);
    CHECK_EQ(huvm_policy_gpu(&core, 1)->role, HUVM_ROLE_NONE);
    p = current();
    p.hysteresis_ms = 1;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(core.policy.preset, HUVM_PRESET_CUSTOM);
    fx_uuid(info.uuid, 6);
    CHECK_EQ(huvm_core_set_gpu(&core, 2, &info), HUVM_NV_OK);
    CHECK_EQ(huvm_policy_gpu(&core, 2)->role, HUVM_ROLE_NONE);
    /* a new entry bumps the generation */
    p.generation = core.policy.generation;
    fx_uuid(info.uuid, 7);
    CHECK_EQ(huvm_core_set_gpu(&core, 3, &info), HUVM_NV_OK);
    CHECK(refused(&p, HUVM_NV_ERR_STATE_IN_USE, HUVM_FIELD_GENERATION));
}
